package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// makeMixed fills dir with every kind of thing a tree keeps, and a few it
// leaves out.
func makeMixed(t testing.TB, dir string) {
	t.Helper()
	write(t, filepath.Join(dir, "plain.txt"), "hello\n", 0o644)
	write(t, filepath.Join(dir, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(dir, "readonly"), "ro", 0o444)
	write(t, filepath.Join(dir, "empty"), "", 0o600)
	write(t, filepath.Join(dir, "a/b/c/deep.txt"), "deep", 0o640)
	write(t, filepath.Join(dir, "name with spaces"), "spaces", 0o644)
	write(t, filepath.Join(dir, "new\nline"), "newline", 0o644)
	write(t, filepath.Join(dir, "bad\xff\xfeutf8"), "bytes", 0o644)
	random := make([]byte, 3<<20)
	rand.Read(random)
	write(t, filepath.Join(dir, "big/random.bin"), string(random), 0o644)
	write(t, filepath.Join(dir, "big/text.log"), strings.Repeat("a line of a log that repeats itself\n", 3<<20/36+1), 0o644)
	for _, d := range []string{"emptydir", "a/emptier"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "shared/in.txt"), "in setgid", 0o664)
	if err := os.Chmod(filepath.Join(dir, "shared"), 0o2775|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(dir, "shared"), 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "locked"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "locked/inside"), "in a read-only folder", 0o644)
	if err := os.Chmod(filepath.Join(dir, "locked"), 0o555); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"rel":      "plain.txt",
		"a/up":     "../plain.txt",
		"abs":      "/etc/passwd",
		"dangling": "no/such/file",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// Left out: the daemon's temporary files and a fifo.
	write(t, filepath.Join(dir, TempPrefix+"123"), "temporary", 0o600)
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	makeMixed(t, src)
	h, st := build(t, r, src, Hash{}, nil, false)

	want := BuildStats{Full: true, Files: 12, Links: 4, Dirs: 8, Read: 16}
	if got := (BuildStats{Full: st.Full, Files: st.Files, Links: st.Links, Dirs: st.Dirs, Read: st.Read}); got != want {
		t.Errorf("stats: got %+v, want %+v", got, want)
	}
	if st.NewObjects == 0 || st.NewBytes == 0 {
		t.Errorf("stats: got %d new objects, %d bytes; want some", st.NewObjects, st.NewBytes)
	}

	dst := t.TempDir()
	restore(t, r, h, dst)
	sameDirs(t, dst, src)
	for _, name := range []string{TempPrefix + "123", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s restored (err %v); want it left out", name, err)
		}
	}

	// The restored folder builds to the same tree.
	if h2, st2 := build(t, r, dst, Hash{}, nil, true); h2 != h {
		t.Errorf("rebuild of the restored folder: got %s, want %s", h2, h)
	} else if st2.NewObjects != 0 {
		t.Errorf("rebuild wrote %d objects; want 0", st2.NewObjects)
	}
}

func TestReadTreeEntries(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "x.sh"), "echo\n", 0o755)
	write(t, filepath.Join(src, "d/y"), "y", 0o600)
	os.Symlink("x.sh", filepath.Join(src, "l"))
	h, _ := build(t, r, src, Hash{}, nil, true)
	tree, err := r.ReadTree(h)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tree {
		got = append(got, e.Name+" "+e.Kind.String())
	}
	want := []string{"d dir", "l link", "x.sh file"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("entries: got %q, want %q", got, want)
	}
	if e := tree[2]; e.Mode != 0o755 || e.Size != 5 {
		t.Errorf("x.sh: got mode %o size %d, want 755 and 5", e.Mode, e.Size)
	}
	if e := tree[1]; e.Mode != 0 || e.Size != 4 {
		t.Errorf("l: got mode %o size %d, want 0 and 4", e.Mode, e.Size)
	}
	// ReadTree's result is the caller's own.
	tree[0].Name = "changed"
	if again, _ := r.ReadTree(h); again[0].Name != "d" {
		t.Errorf("changing a ReadTree result changed the cached tree")
	}
	if got, err := r.ReadTree(EmptyTree()); err != nil || len(got) != 0 {
		t.Errorf("ReadTree(EmptyTree()): got %v, %v; want no entries", got, err)
	}
}

func TestDedupAndCompression(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	text := strings.Repeat("the same words again and again\n", 1000)
	write(t, filepath.Join(src, "one.txt"), text, 0o644)
	write(t, filepath.Join(src, "two.txt"), text, 0o644)
	random := make([]byte, 64<<10)
	rand.Read(random)
	write(t, filepath.Join(src, "random.bin"), string(random), 0o644)
	write(t, filepath.Join(src, "tiny"), "hi", 0o644)

	_, st := build(t, r, src, Hash{}, nil, true)
	// one blob for both texts, one for the random bytes, one tiny, one tree
	if st.NewObjects != 4 {
		t.Errorf("first build: got %d new objects, want 4", st.NewObjects)
	}
	if n := len(objectFiles(t, r)); n != 4 {
		t.Errorf("got %d object files, want 4", n)
	}
	other := t.TempDir()
	write(t, filepath.Join(other, "three.txt"), text, 0o600)
	write(t, filepath.Join(other, "random.bin"), string(random), 0o644)
	_, st = build(t, r, other, Hash{}, nil, true)
	if st.NewObjects != 1 { // the tree
		t.Errorf("second build: got %d new objects, want 1 (its tree)", st.NewObjects)
	}

	for _, tc := range []struct {
		name       string
		content    []byte
		wantFormat byte
	}{
		{"text", []byte(text), formatZstd},
		{"random", random, formatRaw},
		{"tiny", []byte("hi"), formatRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(r.objectPath(sum(tc.content)))
			if err != nil {
				t.Fatal(err)
			}
			if data[0] != tc.wantFormat {
				t.Errorf("format: got %d, want %d", data[0], tc.wantFormat)
			}
			if tc.wantFormat == formatZstd && len(data) > len(tc.content)/8 {
				t.Errorf("compressed to %d of %d bytes; want far less", len(data), len(tc.content))
			}
		})
	}
}

func TestBigFiles(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	random := make([]byte, 3<<20+17)
	rand.Read(random)
	// compressible after its first MiB does not matter: the first MiB decides
	halfText := append(bytes.Repeat([]byte("z"), 2<<20), random[:1<<20]...)
	write(t, filepath.Join(src, "random"), string(random), 0o644)
	write(t, filepath.Join(src, "half"), string(halfText), 0o644)
	write(t, filepath.Join(src, "exact"), strings.Repeat("e", smallMax), 0o644)
	write(t, filepath.Join(src, "over"), strings.Repeat("o", smallMax+1), 0o644)
	h, st := build(t, r, src, Hash{}, nil, true)
	if st.Bytes != int64(len(random)+len(halfText)+2*smallMax+1) {
		t.Errorf("Bytes: got %d, want %d", st.Bytes, len(random)+len(halfText)+2*smallMax+1)
	}
	spreadAll(t, r)
	for name, wantFormat := range map[string]byte{"random": formatRaw, "half": formatZstd, "exact": formatZstd, "over": formatZstd} {
		data, _ := os.ReadFile(filepath.Join(src, name))
		obj, err := os.ReadFile(r.objectPath(sum(data)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj[0] != wantFormat {
			t.Errorf("%s: format got %d, want %d", name, obj[0], wantFormat)
		}
	}
	verifyAll(t, r, h)
	dst := t.TempDir()
	restore(t, r, h, dst)
	sameDirs(t, dst, src)
}

func TestBuildCanceled(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "f"), "x", 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := r.Build(ctx, openRoot(t, src), Hash{}, nil, true); err == nil {
		t.Fatalf("Build with a canceled ctx: got no error")
	}
}

func TestBuildBadChange(t *testing.T) {
	r := openRepo(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "f"), "x", 0o644)
	base, _ := build(t, r, src, Hash{}, nil, true)
	for _, p := range []string{"/f", "a//b", "../x", "a/./b", "f/"} {
		if _, _, err := r.Build(context.Background(), openRoot(t, src), base, []Change{{Path: p}}, false); err == nil {
			t.Errorf("Build with change %q: got no error", p)
		}
	}
}
