package snapshot

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mutator changes a folder at random and says which Changes each change
// implies, as the daemon's filesystem would report them.
type mutator struct {
	t   testing.TB
	dir string
	rnd *rand.Rand
	n   int // names made so far
}

// entries lists the paths below m.dir: folders (with "" for the root),
// files and links.
func (m *mutator) entries() (dirs, files, links []string) {
	dirs = []string{""}
	filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(m.dir, p)
		switch {
		case err != nil || rel == ".":
		case d.Type()&fs.ModeSymlink != 0:
			links = append(links, rel)
		case d.IsDir():
			dirs = append(dirs, rel)
		case d.Type().IsRegular():
			files = append(files, rel)
		}
		return nil
	})
	return dirs, files, links
}

func (m *mutator) pick(list []string) string { return list[m.rnd.IntN(len(list))] }

func (m *mutator) abs(rel string) string { return filepath.Join(m.dir, rel) }

func (m *mutator) newName(parent string) string {
	m.n++
	names := []string{"f%d", "dir %d", "x%d.go", "%d", ".hidden%d", TempPrefix + "%d"}
	return join(parent, fmt.Sprintf(names[m.rnd.IntN(len(names))], m.n))
}

func (m *mutator) content() string {
	switch m.rnd.IntN(4) {
	case 0:
		return "same content\n" // shared by many files
	case 1:
		return ""
	default:
		return strings.Repeat(fmt.Sprintf("line %d\n", m.rnd.IntN(1000)), m.rnd.IntN(50))
	}
}

func (m *mutator) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

// mutate makes one random change and returns its description and the
// changes it implies.
func (m *mutator) mutate() (string, []Change) {
	dirs, files, links := m.entries()
	nonRoot := dirs[1:]
	modes := []os.FileMode{0o644, 0o755, 0o600, 0o700, 0o555}
	for {
		switch m.rnd.IntN(12) {
		case 0, 1: // create a file
			p := m.newName(m.pick(dirs))
			m.must(os.WriteFile(m.abs(p), []byte(m.content()), 0o644))
			return "create " + p, []Change{{Path: p}}
		case 2, 3: // modify a file
			if len(files) == 0 {
				continue
			}
			p := m.pick(files)
			m.must(os.WriteFile(m.abs(p), []byte(m.content()+"changed\n"), 0))
			return "modify " + p, []Change{{Path: p}}
		case 4: // chmod a file or a folder
			all := append(append([]string{}, files...), nonRoot...)
			if len(all) == 0 {
				continue
			}
			p := m.pick(all)
			m.must(os.Chmod(m.abs(p), modes[m.rnd.IntN(len(modes))]))
			return "chmod " + p, []Change{{Path: p}}
		case 5: // delete anything
			all := append(append(append([]string{}, files...), nonRoot...), links...)
			if len(all) == 0 {
				continue
			}
			p := m.pick(all)
			m.must(os.RemoveAll(m.abs(p)))
			return "delete " + p, []Change{{Path: p}}
		case 6: // rename a file
			if len(files) == 0 {
				continue
			}
			from, to := m.pick(files), m.newName(m.pick(dirs))
			m.must(os.Rename(m.abs(from), m.abs(to)))
			return "rename " + from + " to " + to, []Change{{Path: from}, {Path: to}}
		case 7: // rename a folder, to a folder not below it
			if len(nonRoot) == 0 {
				continue
			}
			from := m.pick(nonRoot)
			parent := m.pick(dirs)
			if parent == from || strings.HasPrefix(parent, from+"/") {
				continue
			}
			to := m.newName(parent)
			m.must(os.Rename(m.abs(from), m.abs(to)))
			return "rename folder " + from + " to " + to, []Change{{Path: from}, {Path: to, Tree: true}}
		case 8: // replace a file by a folder
			if len(files) == 0 {
				continue
			}
			p := m.pick(files)
			m.must(os.Remove(m.abs(p)))
			m.must(os.Mkdir(m.abs(p), 0o750))
			m.must(os.WriteFile(m.abs(p+"/inside"), []byte(m.content()), 0o640))
			return "file to folder " + p, []Change{{Path: p, Tree: true}}
		case 9: // replace a folder by a symlink
			if len(nonRoot) == 0 {
				continue
			}
			p := m.pick(nonRoot)
			m.must(os.RemoveAll(m.abs(p)))
			m.must(os.Symlink("../somewhere", m.abs(p)))
			return "folder to link " + p, []Change{{Path: p}}
		case 10: // mkdir -p deep, then a file at the bottom
			p := m.pick(dirs)
			var changes []Change
			for range 2 + m.rnd.IntN(3) {
				p = m.newName(p)
				m.must(os.Mkdir(m.abs(p), 0o755))
				changes = append(changes, Change{Path: p})
			}
			f := m.newName(p)
			m.must(os.WriteFile(m.abs(f), []byte(m.content()), 0o644))
			return "mkdir -p " + p, append(changes, Change{Path: f})
		case 11: // a symlink
			p := m.newName(m.pick(dirs))
			m.must(os.Symlink(m.pick([]string{"/etc/passwd", "f1", "../..", "dir 3/x"}), m.abs(p)))
			return "symlink " + p, []Change{{Path: p}}
		}
	}
}

// TestIncrementalEqualsFull makes random changes to a folder and checks
// after each batch that an incremental build from the previous tree, told
// exactly the changes made, gives the tree a full walk gives.
func TestIncrementalEqualsFull(t *testing.T) {
	r := openRepo(t)
	dir := t.TempDir()
	m := &mutator{t: t, dir: dir, rnd: rand.New(rand.NewPCG(1, 2))}
	for range 20 {
		m.mutate()
	}
	base, _ := build(t, r, dir, Hash{}, nil, true)
	steps := 300
	if testing.Short() {
		steps = 60
	}
	for step := range steps {
		var did []string
		var changes []Change
		for range 1 + m.rnd.IntN(3) {
			what, c := m.mutate()
			did = append(did, what)
			changes = append(changes, c...)
		}
		// Any order, and repeats.
		m.rnd.Shuffle(len(changes), func(i, j int) { changes[i], changes[j] = changes[j], changes[i] })
		if m.rnd.IntN(4) == 0 {
			changes = append(changes, changes[0])
		}
		inc, incStats := build(t, r, dir, base, changes, false)
		full, fullStats := build(t, r, dir, Hash{}, nil, true)
		if inc != full {
			deltas, _ := r.Diff(context.Background(), full, inc)
			t.Fatalf("step %d (%s; changes %v): incremental got %s, full got %s; incremental less full: %v",
				step, strings.Join(did, "; "), changes, inc, full, deltas)
		}
		if incStats.Full {
			t.Fatalf("step %d: the incremental build walked the whole folder", step)
		}
		got := [4]int64{incStats.Files, incStats.Links, incStats.Dirs, incStats.Bytes}
		want := [4]int64{fullStats.Files, fullStats.Links, fullStats.Dirs, fullStats.Bytes}
		if got != want {
			t.Fatalf("step %d (%s): incremental totals (files, links, dirs, bytes) got %v, want %v", step, strings.Join(did, "; "), got, want)
		}
		base = inc
	}
	dst := t.TempDir()
	restore(t, r, base, dst)
	sameDirs(t, dst, dir)
}

// TestIncrementalRules checks the rules for changes one by one.
func TestIncrementalRules(t *testing.T) {
	setup := func(t *testing.T, dir string) {
		write(t, filepath.Join(dir, "a/b/file"), "b", 0o644)
		write(t, filepath.Join(dir, "a/other"), "o", 0o644)
		write(t, filepath.Join(dir, "top"), "t", 0o644)
	}
	for _, tc := range []struct {
		name    string
		mutate  func(t *testing.T, dir string)
		changes []Change
		// same: the incremental build must equal a full one. Otherwise it
		// must equal the base (changes not reported are not seen).
		same bool
	}{
		{"nothing", func(*testing.T, string) {}, nil, true},
		{"unreported change is not seen", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "top"), "changed", 0o644)
		}, nil, false},
		{"file changed", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a/b/file"), "changed", 0o644)
		}, []Change{{Path: "a/b/file"}}, true},
		{"folder's mode only", func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, "a/b"), 0o700)
		}, []Change{{Path: "a/b"}}, true},
		{"change below a file that was a folder is ignored", func(t *testing.T, dir string) {
			os.RemoveAll(filepath.Join(dir, "a/b"))
			write(t, filepath.Join(dir, "a/b"), "now a file", 0o644)
		}, []Change{{Path: "a/b/file"}, {Path: "a/b"}}, true},
		{"change below a gone folder", func(t *testing.T, dir string) {
			os.RemoveAll(filepath.Join(dir, "a"))
		}, []Change{{Path: "a/b/file"}}, true},
		{"tree mark covers below", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "a/b/new"), "n", 0o644)
			write(t, filepath.Join(dir, "a/other"), "changed", 0o644)
		}, []Change{{Path: "a/b/file"}, {Path: "a", Tree: true}}, true},
		{"root tree mark", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "top"), "changed", 0o644)
		}, []Change{{Path: "", Tree: true}}, true},
		{"new folder is walked whole", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "n/e/w"), "w", 0o644)
		}, []Change{{Path: "n"}}, true},
		{"skipped name", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, TempPrefix+"x"), "tmp", 0o644)
		}, []Change{{Path: TempPrefix + "x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := openRepo(t)
			dir := t.TempDir()
			setup(t, dir)
			base, _ := build(t, r, dir, Hash{}, nil, true)
			tc.mutate(t, dir)
			got, st := build(t, r, dir, base, tc.changes, false)
			want := base
			if tc.same {
				want, _ = build(t, r, dir, Hash{}, nil, true)
			}
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
			if st.Full != (len(tc.changes) == 1 && tc.changes[0].Path == "" && tc.changes[0].Tree) {
				t.Errorf("Full: got %v", st.Full)
			}
		})
	}
}

// TestIncrementalCost checks that an incremental build of a few changed
// files in a big tree reads only those.
func TestIncrementalCost(t *testing.T) {
	r := openRepo(t)
	dir := t.TempDir()
	const folders, perFolder = 200, 100
	makeWide(t, dir, folders, perFolder)
	start := time.Now()
	base, st := build(t, r, dir, Hash{}, nil, true)
	fullTime := time.Since(start)
	if st.Files != folders*perFolder || st.Read != folders*perFolder {
		t.Fatalf("full build: got %d files, %d read; want %d", st.Files, st.Read, folders*perFolder)
	}
	var changes []Change
	for i := range 10 {
		p := fmt.Sprintf("d%03d/f%03d", i*17, i*7)
		write(t, filepath.Join(dir, p), fmt.Sprintf("changed %d", i), 0o644)
		changes = append(changes, Change{Path: p})
	}
	start = time.Now()
	h, st := build(t, r, dir, base, changes, false)
	incTime := time.Since(start)
	if st.Read != 10 {
		t.Errorf("incremental build read %d files, want 10", st.Read)
	}
	if st.Files != folders*perFolder {
		t.Errorf("incremental build: got %d files in the tree, want %d", st.Files, folders*perFolder)
	}
	// 10 blobs, 10 folders and the root
	if st.NewObjects != 21 {
		t.Errorf("incremental build wrote %d objects, want 21", st.NewObjects)
	}
	if full, _ := build(t, r, dir, Hash{}, nil, true); full != h {
		t.Errorf("incremental got %s, full got %s", h, full)
	}
	t.Logf("full build of %d files: %v; incremental of 10: %v", folders*perFolder, fullTime, incTime)
}

// makeWide fills dir with folders d000... of perFolder small files each.
func makeWide(t testing.TB, dir string, folders, perFolder int) {
	t.Helper()
	for i := range folders {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range perFolder {
			p := filepath.Join(d, fmt.Sprintf("f%03d", j))
			if err := os.WriteFile(p, []byte(fmt.Sprintf("file %d of folder %d\n", j, i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
