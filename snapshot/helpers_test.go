package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// cannotRun stops a test that lacks what it needs: a failure under
// CI=true, where the suite must not pass by skipping, a skip elsewhere.
// (internal/testenv.CannotRun's rule; this package imports nothing of
// warren, its tests neither.)
func cannotRun(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// openRepo opens a repository in a new temporary folder, closed at the
// test's end.
func openRepo(t testing.TB, opts ...Option) *Repo {
	t.Helper()
	r, err := Open(filepath.Join(t.TempDir(), "repo"), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// openRoot opens dir O_PATH, as the daemon hands workspaces to Build.
func openRoot(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// build builds dir and fails the test on an error.
func build(t testing.TB, r *Repo, dir string, base Hash, changes []Change, full bool) (Hash, BuildStats) {
	t.Helper()
	h, st, err := r.Build(context.Background(), openRoot(t, dir), base, changes, full)
	if err != nil {
		t.Fatalf("Build(%s, full=%v, %d changes): %v", dir, full, len(changes), err)
	}
	return h, st
}

// write makes the file p (and its folders) with content and mode.
func write(t testing.TB, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// describe returns what a tree of dir holds, one line per path: kind,
// mode and content's hash or link target; fifos, sockets, devices and
// names DefaultSkip names are left out, as Build leaves them.
func describe(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if DefaultSkip(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		mode := st.Mode & 0o7777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %04o %d %s", mode, len(data), hex.EncodeToString(s[:8]))
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("link -> %q", target)
		case unix.S_IFDIR:
			out[rel] = fmt.Sprintf("dir %04o", mode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("describe %s: %v", dir, err)
	}
	return out
}

// sameDirs fails the test where the folders got and want differ in any
// path, kind, mode, content or link target.
func sameDirs(t testing.TB, got, want string) {
	t.Helper()
	g, w := describe(t, got), describe(t, want)
	var diffs []string
	for _, p := range slices.Sorted(mapKeysOf(w)) {
		if g[p] != w[p] {
			diffs = append(diffs, fmt.Sprintf("%q: got %q, want %q", p, g[p], w[p]))
		}
	}
	for _, p := range slices.Sorted(mapKeysOf(g)) {
		if _, ok := w[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q: got %q, want nothing", p, g[p]))
		}
	}
	if len(diffs) > 0 {
		t.Fatalf("%s differs from %s:\n%s", got, want, strings.Join(diffs, "\n"))
	}
}

func mapKeysOf[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dirTarget is a Target that really writes, into a folder, through
// os.Root so that no path leaves it. failAfter > 0 makes every call past
// that many fail, as a crash would cut a plan short.
type dirTarget struct {
	root      *os.Root
	calls     atomic.Int64
	failAfter int64
	dense     bool // read every content whole, as a Target that cannot make holes does
}

var _ Target = (*dirTarget)(nil)

func newDirTarget(t testing.TB, dir string) *dirTarget {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &dirTarget{root: root}
}

var errCut = errors.New("target: cut short")

func (d *dirTarget) call() error {
	if n := d.calls.Add(1); d.failAfter > 0 && n > d.failAfter {
		return errCut
	}
	return nil
}

// fileMode converts permission bits to an os.FileMode.
func fileMode(mode uint32) os.FileMode {
	m := os.FileMode(mode & 0o777)
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

func (d *dirTarget) RemoveAll(ctx context.Context, p string) error {
	if err := d.call(); err != nil {
		return err
	}
	return d.root.RemoveAll(p)
}

func (d *dirTarget) Mkdir(ctx context.Context, p string, mode uint32) error {
	if err := d.call(); err != nil {
		return err
	}
	err := d.root.Mkdir(p, fileMode(mode&0o777))
	if errors.Is(err, fs.ErrExist) {
		if fi, err := d.root.Lstat(p); err != nil || !fi.IsDir() {
			return fmt.Errorf("mkdir %s: not a folder", p)
		}
	} else if err != nil {
		return err
	}
	return d.root.Chmod(p, fileMode(mode))
}

func (d *dirTarget) tempName(p string) string {
	return path.Join(path.Dir(p), fmt.Sprintf(".apply-%d", rand.Int64()))
}

func (d *dirTarget) WriteFile(ctx context.Context, p string, mode uint32, content io.Reader) error {
	if err := d.call(); err != nil {
		return err
	}
	tmp := d.tempName(p)
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if sc, ok := content.(SparseContent); ok && !d.dense {
		err = f.Truncate(sc.Size())
		if err == nil {
			err = sc.WriteSparse(ctx, f)
		}
	} else {
		_, err = io.Copy(f, content)
	}
	if err == nil {
		err = f.Chmod(fileMode(mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, p)
	}
	if err != nil {
		d.root.Remove(tmp)
	}
	return err
}

func (d *dirTarget) Symlink(ctx context.Context, p, target string) error {
	if err := d.call(); err != nil {
		return err
	}
	tmp := d.tempName(p)
	if err := d.root.Symlink(target, tmp); err != nil {
		return err
	}
	if err := d.root.Rename(tmp, p); err != nil {
		d.root.Remove(tmp)
		return err
	}
	return nil
}

func (d *dirTarget) Chmod(ctx context.Context, p string, mode uint32) error {
	if err := d.call(); err != nil {
		return err
	}
	return d.root.Chmod(p, fileMode(mode))
}

// restore applies the tree h to the empty folder dir through a dirTarget.
func restore(t testing.TB, r *Repo, h Hash, dir string) []string {
	t.Helper()
	deltas, err := r.Diff(context.Background(), Hash{}, h)
	if err != nil {
		t.Fatalf("Diff(empty, %s): %v", h, err)
	}
	changed, err := r.Apply(context.Background(), deltas, newDirTarget(t, dir))
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return changed
}

// spreadAll waits until r's spreader has spread every log r published,
// so that its objects are loose files.
func spreadAll(t testing.TB, r *Repo) {
	t.Helper()
	if err := r.waitSpread(context.Background()); err != nil {
		t.Fatalf("spread: %v", err)
	}
}

// objectFiles lists the object files of r, once its logs are spread.
func objectFiles(t testing.TB, r *Repo) []string {
	t.Helper()
	spreadAll(t, r)
	var out []string
	err := filepath.WalkDir(r.objects, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// verifyAll reads back the tree h completely: every tree decoded, every
// blob read to its end and checked.
func verifyAll(t testing.TB, r *Repo, h Hash) {
	t.Helper()
	var walk func(h Hash, rel string)
	walk = func(h Hash, rel string) {
		tree, err := r.ReadTree(h)
		if err != nil {
			t.Fatalf("ReadTree(%q = %s): %v", rel, h, err)
		}
		for _, e := range tree {
			if e.Kind == KindDir {
				walk(e.Hash, rel+"/"+e.Name)
				continue
			}
			rc, err := r.OpenBlob(e.Hash)
			if err != nil {
				t.Fatalf("OpenBlob(%q = %s): %v", rel+"/"+e.Name, e.Hash, err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != e.Size {
				t.Fatalf("read %q: got %d bytes, err %v; want %d bytes", rel+"/"+e.Name, n, err, e.Size)
			}
		}
	}
	walk(h, "")
}
