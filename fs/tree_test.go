package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tree calls of the file API (tree.go, tree_change.go). They need no
// mount, but for the test that a mount sees their changes at once.

// treeFixture makes, in dir:
//
//	src/app.ts (0640, "let a = 1\n")   src/lib/ (0750)   src/run.sh (0755)
//	link -> src/app.ts                  via -> src        fifo
//	out -> <a folder outside>           abs -> /etc/passwd
//	.warren-write-0123456789abcdef (a leftover temporary file)
//
// and returns the folder outside, which holds secret.
func treeFixture(t *testing.T, dir string) string {
	t.Helper()
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "src", "lib"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "src", "lib"), 0o750))
	must(t, os.WriteFile(filepath.Join(dir, "src", "app.ts"), []byte("let a = 1\n"), 0o640))
	must(t, os.Chmod(filepath.Join(dir, "src", "app.ts"), 0o640))
	must(t, os.WriteFile(filepath.Join(dir, "src", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "src", "run.sh"), 0o755))
	must(t, os.Symlink("src/app.ts", filepath.Join(dir, "link")))
	must(t, os.Symlink("src", filepath.Join(dir, "via")))
	must(t, os.Symlink(outside, filepath.Join(dir, "out")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "abs")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, tempPrefix+"0123456789abcdef"), []byte("left"), 0o600))
	return outside
}

// short is what a test compares of an entry: all but its time.
type short struct {
	Path    string
	Type    EntryType
	Size    int64
	Mode    uint32
	Target  string
	Version bool // has one
}

func shorten(es []EntryInfo) []short {
	var out []short
	for _, e := range es {
		out = append(out, short{e.Path, e.Type, e.Size, e.Mode, e.Target, e.Version != 0})
	}
	return out
}

// TestTreeList: a folder's entries, sorted, with their kinds, modes,
// sizes, link targets and versions; hidden temporary files left out;
// links on the way followed inside the workspace, never out.
func TestTreeList(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	treeFixture(t, dir)
	a := RunActor("r")

	root, err := f.List(ctx, a, ".")
	must(t, err)
	want := []short{
		{"abs", TypeSymlink, int64(len("/etc/passwd")), 0o777, "/etc/passwd", true},
		{"fifo", TypeOther, 0, 0o600, "", true},
		{"link", TypeSymlink, int64(len("src/app.ts")), 0o777, "src/app.ts", true},
	}
	got := shorten(root)
	// out's target is a temporary folder: compare it apart.
	if len(got) != 6 || got[3].Path != "out" || got[3].Type != TypeSymlink || got[3].Target == "" {
		t.Fatalf("root: got %+v", got)
	}
	if !reflect.DeepEqual(got[:3], want) {
		t.Errorf("root: got %+v, want %+v first", got[:3], want)
	}
	if got[4].Path != "src" || got[4].Type != TypeDir || got[5].Path != "via" || got[5].Target != "src" {
		t.Errorf("root: got %+v, want src and via last", got[4:])
	}
	for _, e := range root {
		if e.MTime.IsZero() || time.Since(e.MTime) > time.Hour {
			t.Errorf("%s: mtime %v", e.Path, e.MTime)
		}
	}

	// A folder through a link: the paths are the ones asked for.
	src, err := f.List(ctx, a, "via/")
	must(t, err)
	wantSrc := []short{
		{"via/app.ts", TypeFile, 10, 0o640, "", true},
		{"via/lib", TypeDir, 0, 0o750, "", true},
		{"via/run.sh", TypeFile, 10, 0o755, "", true},
	}
	if gotSrc := shorten(src); len(gotSrc) != 3 || gotSrc[1].Type != TypeDir {
		t.Fatalf("via: got %+v", gotSrc)
	} else {
		gotSrc[1].Size = 0 // a folder's size is the filesystem's
		if !reflect.DeepEqual(gotSrc, wantSrc) {
			t.Errorf("via: got %+v, want %+v", gotSrc, wantSrc)
		}
	}

	// A listed version is the one a read sees; listing records no read.
	_, v, err := f.Read(ctx, a, "src/app.ts")
	must(t, err)
	if src[0].Version != v {
		t.Errorf("listed version %d, read version %d", src[0].Version, v)
	}
	lister := RunActor("lister")
	if _, err := f.List(ctx, lister, "src"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, RunActor("other"), "src/app.ts", []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, lister, "src/app.ts", []byte("c\n")); err != nil {
		t.Errorf("a run that only listed the folder was refused: %v", err)
	}
	after, err := f.List(ctx, a, "src")
	must(t, err)
	if after[0].Version <= v {
		t.Errorf("version after two writes %d, before %d", after[0].Version, v)
	}

	for _, c := range []struct {
		p    string
		want any
	}{
		{"src/app.ts", &NotFolderError{}},
		{"link", &NotFolderError{}},
		{"missing", iofs.ErrNotExist},
		{"src/missing", iofs.ErrNotExist},
		{"out", &OutsideError{}},
		{"out/", &OutsideError{}},
		{"abs", &OutsideError{}},
		{"../", &OutsideError{}},
		{"/etc", &OutsideError{}},
		{"src/../..", &OutsideError{}},
		{"a\x00b", &OutsideError{}},
	} {
		_, err := f.List(ctx, a, c.p)
		if !matches(err, c.want) {
			t.Errorf("list %q: %v, want %T %v", c.p, err, c.want, c.want)
		}
	}
}

// matches reports whether err is want (a sentinel) or of want's type (a
// pointer to an error type).
func matches(err error, want any) bool {
	switch w := want.(type) {
	case *NotFolderError:
		return errors.As(err, &w)
	case *OutsideError:
		return errors.As(err, &w)
	case *ExistsError:
		return errors.As(err, &w)
	case *NotEmptyError:
		return errors.As(err, &w)
	case *RootError:
		return errors.As(err, &w)
	case *StaleError:
		return errors.As(err, &w)
	case *LinkOutError:
		return errors.As(err, &w)
	case *NotFileError:
		return errors.As(err, &w)
	case error:
		return errors.Is(err, w)
	}
	return false
}

// TestTreeStatExists: stat describes an entry or, following, what a link
// leads to; exists says whether there is one.
func TestTreeStatExists(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	treeFixture(t, dir)
	must(t, os.Symlink("nothing", filepath.Join(dir, "dangling")))
	must(t, os.Symlink("loop2", filepath.Join(dir, "loop1")))
	must(t, os.Symlink("loop1", filepath.Join(dir, "loop2")))
	a := RunActor("r")

	for _, c := range []struct {
		p      string
		follow bool
		want   short
	}{
		{"src/app.ts", false, short{"src/app.ts", TypeFile, 10, 0o640, "", true}},
		{"link", false, short{"link", TypeSymlink, 10, 0o777, "src/app.ts", true}},
		{"link", true, short{"link", TypeFile, 10, 0o640, "", true}},
		{"via/run.sh", true, short{"via/run.sh", TypeFile, 10, 0o755, "", true}},
		{"via/run.sh", false, short{"via/run.sh", TypeFile, 10, 0o755, "", true}},
		{"abs", false, short{"abs", TypeSymlink, 11, 0o777, "/etc/passwd", true}},
		{"fifo", true, short{"fifo", TypeOther, 0, 0o600, "", true}},
	} {
		got, err := f.Stat(ctx, a, c.p, c.follow)
		if err != nil {
			t.Errorf("stat %q follow %v: %v", c.p, c.follow, err)
			continue
		}
		if s := shorten([]EntryInfo{got})[0]; s != c.want {
			t.Errorf("stat %q follow %v: got %+v, want %+v", c.p, c.follow, s, c.want)
		}
	}
	if st, err := f.Stat(ctx, a, ".", false); err != nil || st.Type != TypeDir || st.Path != "." {
		t.Errorf("stat of the root: %+v, %v", st, err)
	}
	for _, c := range []struct {
		p      string
		follow bool
		want   any
	}{
		{"missing", false, iofs.ErrNotExist},
		{"dangling", true, iofs.ErrNotExist},
		{"loop1", true, syscall.ELOOP},
		{"abs", true, &OutsideError{}},
		{"out/secret", false, &OutsideError{}},
		{"../x", false, &OutsideError{}},
		{"/etc/passwd", false, &OutsideError{}},
		{"x\x00", false, &OutsideError{}},
	} {
		if _, err := f.Stat(ctx, a, c.p, c.follow); !matches(err, c.want) {
			t.Errorf("stat %q follow %v: %v, want %v", c.p, c.follow, err, c.want)
		}
	}

	for _, c := range []struct {
		p      string
		exists bool
		typ    EntryType
	}{
		{"src/app.ts", true, TypeFile},
		{"src", true, TypeDir},
		{".", true, TypeDir},
		{"link", true, TypeFile},
		{"via/lib", true, TypeDir},
		{"fifo", true, TypeOther},
		{"missing", false, ""},
		{"missing/deeper", false, ""},
		{"src/app.ts/x", false, ""},
		{"dangling", false, ""},
		{"loop1", false, ""},
	} {
		ok, typ, err := f.Exists(ctx, a, c.p)
		if err != nil || ok != c.exists || typ != c.typ {
			t.Errorf("exists %q: %v %q %v, want %v %q", c.p, ok, typ, err, c.exists, c.typ)
		}
	}
	for _, p := range []string{"../x", "/etc/passwd", "out/secret", "abs", "a\x00"} {
		if _, _, err := f.Exists(ctx, a, p); !matches(err, &OutsideError{}) {
			t.Errorf("exists %q: %v, want outside", p, err)
		}
	}
}

// TestTreeMkdir: a folder gets exactly its mode and its folder's owner,
// is marked as a new tree, and exists after; with parents, as mkdir -p.
func TestTreeMkdir(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	treeFixture(t, dir)
	a := RunActor("r")
	must(t, os.Chown(filepath.Join(dir, "src"), 1234, 5678))
	f.TakeChanges()

	must(t, f.Mkdir(ctx, a, "src/new", false, 0o777))
	must(t, f.Mkdir(ctx, a, "via/private", false, 0o700))
	must(t, f.Mkdir(ctx, a, "top", false, 0o755))
	for _, c := range []struct {
		p    string
		mode os.FileMode
		uid  uint32
	}{{"src/new", 0o777, 1234}, {"src/private", 0o700, 1234}, {"top", 0o755, 0}} {
		var st syscall.Stat_t
		must(t, syscall.Lstat(filepath.Join(dir, c.p), &st))
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || os.FileMode(st.Mode&0o7777) != c.mode || st.Uid != c.uid {
			t.Errorf("%s: mode %o owner %d, want a folder %o owned by %d", c.p, st.Mode, st.Uid, c.mode, c.uid)
		}
	}
	wantChanges(t, f, map[string]bool{"src/new": true, "src/private": true, "top": true})

	for _, c := range []struct {
		p    string
		want any
	}{
		{"src", &ExistsError{}},
		{"src/app.ts", iofs.ErrExist},
		{"link", &ExistsError{}},
		{".", &ExistsError{}},
		{"missing/new", iofs.ErrNotExist},
		{"out/new", &OutsideError{}},
		{"../new", &OutsideError{}},
		{"/tmp/new", &OutsideError{}},
	} {
		if err := f.Mkdir(ctx, a, c.p, false, 0o755); !matches(err, c.want) {
			t.Errorf("mkdir %q: %v, want %v", c.p, err, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "new")); !os.IsNotExist(err) {
		t.Errorf("a folder was made outside: %v", err)
	}

	// With parents: the missing ones are made, the ones there are fine,
	// a file on the way is not.
	must(t, f.Mkdir(ctx, a, "deep/er/est", true, 0o711))
	must(t, f.Mkdir(ctx, a, "deep/er/est", true, 0o711))
	must(t, f.Mkdir(ctx, a, "via/lib/x", true, 0o755))
	must(t, f.Mkdir(ctx, a, "via", true, 0o755)) // a link to a folder
	must(t, f.Mkdir(ctx, a, ".", true, 0o755))
	for _, p := range []string{"deep", "deep/er", "deep/er/est"} {
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o711 {
			t.Errorf("%s: %v, %v", p, st.Mode(), err)
		}
	}
	wantChanges(t, f, map[string]bool{"deep": true, "deep/er": true, "deep/er/est": true, "src/lib/x": true})
	if err := f.Mkdir(ctx, a, "src/app.ts/x", true, 0o755); err == nil {
		t.Error("mkdir -p through a file was allowed")
	}
	if err := f.Mkdir(ctx, a, "out/x/y", true, 0o755); !matches(err, &OutsideError{}) {
		t.Errorf("mkdir -p through a link out: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "..", "x")); !os.IsNotExist(err) {
		t.Errorf("a folder was made outside: %v", err)
	}
}

// TestTreeRemove: a file, a link (not its target), an empty folder, and
// with recursive a deep tree with links out and a fifo, whose targets
// stay; the root and a non-empty folder without recursive are refused.
func TestTreeRemove(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	outside := treeFixture(t, dir)
	a := RunActor("r")
	f.TakeChanges()

	n, err := f.Remove(ctx, a, "link", false)
	if err != nil || n != 1 {
		t.Fatalf("remove link: %d, %v", n, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "link")); !os.IsNotExist(err) {
		t.Errorf("link: %v", err)
	}
	if got := readString(t, filepath.Join(dir, "src/app.ts")); got != "let a = 1\n" {
		t.Errorf("the link's target: %q", got)
	}
	for _, p := range []string{"out", "abs"} { // links out: removed as links
		if _, err := f.Remove(ctx, a, p, false); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	}
	if got := readString(t, filepath.Join(outside, "secret")); got != "s" {
		t.Fatalf("the secret outside: %q", got)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
	wantChanges(t, f, map[string]bool{"link": false, "out": false, "abs": false})

	for _, c := range []struct {
		p         string
		recursive bool
		want      any
	}{
		{"src", false, &NotEmptyError{}},
		{"src", false, syscall.ENOTEMPTY},
		{".", true, &RootError{}},
		{"src/..", true, &RootError{}},
		{"missing", false, iofs.ErrNotExist},
		{"missing/x", true, iofs.ErrNotExist},
		{"../x", true, &OutsideError{}},
		{"/etc/passwd", false, &OutsideError{}},
		{"via/../../x", true, &OutsideError{}},
	} {
		if n, err := f.Remove(ctx, a, c.p, c.recursive); !matches(err, c.want) || n != 0 {
			t.Errorf("remove %q recursive %v: %d, %v; want %v", c.p, c.recursive, n, err, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "src", "app.ts")); err != nil {
		t.Fatalf("a refused remove removed: %v", err)
	}

	// Through a link on the way: the entry it leads to goes.
	if n, err := f.Remove(ctx, a, "via/lib", false); err != nil || n != 1 {
		t.Fatalf("remove via/lib: %d, %v", n, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "src", "lib")); !os.IsNotExist(err) {
		t.Errorf("src/lib: %v", err)
	}
	wantChanges(t, f, map[string]bool{"src/lib": true})

	// A deep tree, with links out and a fifo.
	deep := filepath.Join(dir, "tree")
	for i := range 30 {
		deep = filepath.Join(deep, fmt.Sprint("d", i))
		must(t, os.MkdirAll(deep, 0o755))
		must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o444))
	}
	must(t, os.Symlink(outside, filepath.Join(dir, "tree", "d0", "out")))
	must(t, os.Symlink("/etc", filepath.Join(deep, "etc")))
	must(t, os.Symlink("../../../../../../../../../../../..", filepath.Join(deep, "up")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "tree", "d0", "fifo"), 0o644))
	must(t, os.Chmod(filepath.Join(dir, "tree", "d0", "d1"), 0o500))
	n, err = f.Remove(ctx, a, "tree", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 30*2 + 3 + 1; n != want {
		t.Errorf("removed %d entries, want %d", n, want)
	}
	if _, err := os.Lstat(filepath.Join(dir, "tree")); !os.IsNotExist(err) {
		t.Fatalf("tree: %v", err)
	}
	if got := readString(t, filepath.Join(outside, "secret")); got != "s" {
		t.Fatalf("the secret outside: %q", got)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc: %v", err)
	}
	changes, complete := takeMap(t, f)
	if !complete || !changes["tree"] || !changes["tree/d0/fifo"] {
		t.Errorf("changes after remove -r: %v (complete %v)", changes, complete)
	}
	// A file and an empty folder, and a recursive remove of a file.
	must(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	for _, p := range []string{"src/run.sh", "empty"} {
		if n, err := f.Remove(ctx, a, p, false); err != nil || n != 1 {
			t.Errorf("remove %s: %d, %v", p, n, err)
		}
	}
	if n, err := f.Remove(ctx, a, "fifo", true); err != nil || n != 1 {
		t.Errorf("remove -r of a fifo: %d, %v", n, err)
	}
}

// TestTreeRemoveStale: a run that read a file before another changed it
// cannot remove it, alone or in a tree, and a refused recursive remove
// removes nothing; after a fresh read it can.
func TestTreeRemoveStale(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a, b := RunActor("a"), RunActor("b")
	for i := range 20 {
		p := filepath.Join(dir, "tree", fmt.Sprint("d", i%4), fmt.Sprint("f", i))
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("x"), 0o644))
	}
	if _, _, err := f.Read(ctx, a, "tree/d3/f19"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Read(ctx, a, "tree/d0/f0"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, b, "tree/d3/f19", []byte("b's")); err != nil {
		t.Fatal(err)
	}
	before := listing(t, filepath.Join(dir, "tree", "d0")) + listing(t, filepath.Join(dir, "tree", "d3"))
	n, err := f.Remove(ctx, a, "tree", true)
	var stale *StaleError
	if !errors.As(err, &stale) || stale.Path != "tree/d3/f19" || n != 0 {
		t.Fatalf("a's remove -r after b's write: %d, %v; want refused for tree/d3/f19", n, err)
	}
	if err.Error() != "tree/d3/f19 changed since it was read. Read it again before you edit it." {
		t.Errorf("message %q", err)
	}
	if after := listing(t, filepath.Join(dir, "tree", "d0")) + listing(t, filepath.Join(dir, "tree", "d3")); after != before {
		t.Fatalf("the refused remove removed entries: %s, before %s", after, before)
	}
	if _, err := f.Remove(ctx, a, "tree/d3/f19", false); !errors.As(err, &stale) {
		t.Fatalf("a's remove of the file: %v, want stale", err)
	}
	if got := readString(t, filepath.Join(dir, "tree/d3/f19")); got != "b's" {
		t.Fatalf("b's file: %q", got)
	}
	// b may remove what it wrote; a, once it read again, the rest.
	if n, err := f.Remove(ctx, b, "tree/d3", true); err != nil || n != 6 {
		t.Fatalf("b's remove: %d, %v", n, err)
	}
	if n, err := f.Remove(ctx, a, "tree", true); err != nil || n != 1+3+15 {
		t.Fatalf("a's remove of the rest: %d, %v", n, err)
	}
	// A behind-the-back change counts too.
	must(t, os.WriteFile(filepath.Join(dir, "g"), []byte("1"), 0o644))
	if _, _, err := f.Read(ctx, a, "g"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(dir, "g"), []byte("2"), 0o644))
	if _, err := f.Remove(ctx, a, "g", false); !errors.As(err, &stale) {
		t.Fatalf("remove after a change behind the back: %v", err)
	}
}

// TestTreeRename: files and folders move within the workspace with their
// versions; an entry is not replaced without overwrite, nor with it when
// the run read it before its last change; a link as the last component
// moves as a link; hostile paths are refused.
func TestTreeRename(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	outside := treeFixture(t, dir)
	a, b := RunActor("a"), RunActor("b")
	f.TakeChanges()

	v, err := f.Rename(ctx, a, "src/app.ts", "app.ts", false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat(ctx, a, "app.ts", false)
	if err != nil || st.Version != v || st.Mode != 0o640 {
		t.Fatalf("after rename: %+v, %v; version %d", st, err, v)
	}
	if _, err := os.Lstat(filepath.Join(dir, "src/app.ts")); !os.IsNotExist(err) {
		t.Fatalf("src/app.ts: %v", err)
	}
	wantChanges(t, f, map[string]bool{"src/app.ts": false, "app.ts": false})

	// A link moves as a link, through a link on the way.
	must(t, os.Symlink("../app.ts", filepath.Join(dir, "src", "l")))
	if _, err := f.Rename(ctx, a, "via/l", "src/lib/l2", false); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "src/lib/l2")); err != nil || got != "../app.ts" {
		t.Fatalf("the moved link: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "app.ts")); err != nil {
		t.Fatalf("the link's target moved: %v", err)
	}
	// A folder moves with its tree.
	if _, err := f.Rename(ctx, a, "src/lib", "lib", false); err != nil {
		t.Fatal(err)
	}
	wantChanges(t, f, map[string]bool{"src/l": false, "src/lib/l2": false, "src/lib": true, "lib": true})

	// No replacing without overwrite.
	must(t, os.WriteFile(filepath.Join(dir, "dst"), []byte("dst\n"), 0o600))
	if _, err := f.Rename(ctx, a, "app.ts", "dst", false); !matches(err, &ExistsError{}) {
		t.Fatalf("rename over dst: %v, want exists", err)
	}
	// Stale: a read dst, b changed it; a may not rename over it.
	if _, _, err := f.Read(ctx, a, "dst"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, b, "dst", []byte("b's\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Rename(ctx, a, "app.ts", "dst", true); !matches(err, &StaleError{}) {
		t.Fatalf("a's rename over b's change: %v, want stale", err)
	}
	if got := readString(t, filepath.Join(dir, "dst")); got != "b's\n" {
		t.Fatalf("dst after the refused rename: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "app.ts")); err != nil {
		t.Fatalf("app.ts after the refused rename: %v", err)
	}
	// b, whose write is as good as a read, may.
	v, err = f.Rename(ctx, b, "app.ts", "dst", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(dir, "dst")); got != "let a = 1\n" {
		t.Fatalf("dst after the rename: %q", got)
	}
	if st, _ := f.Stat(ctx, a, "dst", false); st.Version != v {
		t.Errorf("version %d, stat says %d", v, st.Version)
	}
	// a's record of dst is stale now: the file it read is gone.
	if _, err := f.Write(ctx, a, "dst", []byte("a's")); !matches(err, &StaleError{}) {
		t.Errorf("a's write after the rename over its read: %v, want stale", err)
	}

	must(t, os.MkdirAll(filepath.Join(dir, "full", "x"), 0o755))
	must(t, os.Mkdir(filepath.Join(dir, "empty"), 0o755))
	for _, c := range []struct {
		from, to  string
		overwrite bool
		want      any
	}{
		{"missing", "x", false, iofs.ErrNotExist},
		{"dst", "missing/x", false, iofs.ErrNotExist},
		{".", "x", false, &RootError{}},
		{"dst", ".", true, &RootError{}},
		{"lib", "full", true, &NotEmptyError{}},
		{"lib", "lib/inner", false, syscall.EINVAL},
		{"dst", "empty", true, syscall.EISDIR},
		{"../x", "y", false, &OutsideError{}},
		{"dst", "../y", false, &OutsideError{}},
		{"dst", "/tmp/y", false, &OutsideError{}},
		{"dst", "out/y", false, &OutsideError{}},
		{"out/secret", "y", false, &OutsideError{}},
		{"dst\x00", "y", false, &OutsideError{}},
	} {
		if _, err := f.Rename(ctx, a, c.from, c.to, c.overwrite); !matches(err, c.want) {
			t.Errorf("rename %q to %q: %v, want %v", c.from, c.to, err, c.want)
		}
	}
	if got := readString(t, filepath.Join(outside, "secret")); got != "s" {
		t.Fatalf("the secret outside: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("outside holds %d entries", len(entries))
	}
	// A folder over an empty folder, with overwrite.
	if _, err := f.Rename(ctx, a, "lib", "empty", true); err != nil {
		t.Fatalf("folder over an empty folder: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "empty", "l2")); err != nil {
		t.Fatalf("the moved folder's link: %v", err)
	}
	// Onto itself: nothing moves.
	if _, err := f.Rename(ctx, a, "dst", "dst", false); err != nil {
		t.Errorf("rename onto itself: %v", err)
	}
}

// TestTreeRenameLinkOut: as on a mount, a rename to another folder that
// would carry a link (itself, or one in a moved folder) to where it leads
// out is refused, and nothing moves; the same moves deeper, or in place,
// are fine.
func TestTreeRenameLinkOut(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	p := func(s string) string { return filepath.Join(dir, s) }
	must(t, os.MkdirAll(p("a/b/c/d"), 0o755))
	must(t, os.MkdirAll(p("a/b/e"), 0o755))
	must(t, os.MkdirAll(p("t"), 0o755))
	must(t, os.Symlink("../x", p("a/b/l")))               // a/x: inside
	must(t, os.Symlink("../../../../x", p("a/b/c/d/l2"))) // the root's x
	must(t, os.Symlink("../d/l2", p("a/b/c/d/inner")))

	for _, c := range []struct{ from, to string }{
		{"a/b/l", "l"},     // ../x from the root
		{"a/b/c", "c"},     // l2 would climb three above the root
		{"a/b/c", "t/c"},   // one above
		{"a/b/c/d", "t/d"}, // d/l2 from t/d: climbs two above
	} {
		_, err := f.Rename(ctx, a, c.from, c.to, false)
		var out *LinkOutError
		if !errors.As(err, &out) || !errors.Is(err, syscall.EPERM) {
			t.Errorf("rename %s to %s: %v, want a link leading out refused", c.from, c.to, err)
		} else if !strings.Contains(err.Error(), "a link would lead outside the workspace") {
			t.Errorf("message %q", err)
		}
	}
	for _, l := range []string{"a/b/l", "a/b/c/d/l2", "a/b/c/d/inner"} {
		if _, err := os.Lstat(p(l)); err != nil {
			t.Fatalf("a refused rename moved %s: %v", l, err)
		}
	}
	for _, c := range []struct{ from, to string }{
		{"a/b/l", "a/b/l1"},     // in place
		{"a/b/l1", "t/l"},       // t/../x: inside
		{"a/b/c", "a/b/e/c"},    // deeper
		{"a/b/e/c", "a/b/e/c2"}, // in place
		{"a/b/e/c2", "a/b/c"},   // back
	} {
		if _, err := f.Rename(ctx, a, c.from, c.to, false); err != nil {
			t.Errorf("rename %s to %s: %v", c.from, c.to, err)
		}
	}
}

// TestTreeGate: every modifying tree call waits while the workspace is
// frozen (a checkpoint reads it), and changes nothing before it thaws.
func TestTreeGate(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	blocked := make(chan struct{}, 8)
	hook := func() { blocked <- struct{}{} }
	f.changes.blocked.Store(&hook)
	must(t, os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "d", "e", "f"), []byte("x"), 0o644))
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"mkdir", func() error { return f.Mkdir(ctx, a, "m/n", true, 0o755) }},
		{"rename", func() error { _, err := f.Rename(ctx, a, "d/e/f", "g", false); return err }},
		{"remove", func() error { _, err := f.Remove(ctx, a, "d", true); return err }},
		{"write", func() error {
			_, _, err := f.WriteFrom(ctx, a, "w/x", strings.NewReader("streamed"), nil)
			return err
		}},
	} {
		before := listing(t, dir)
		thaw := f.Freeze()
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case <-blocked: // the call waits at the gate
		case err := <-done:
			thaw()
			t.Fatalf("%s ran while the workspace was frozen (%v)", c.name, err)
		}
		frozen := listing(t, dir)
		thaw()
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if frozen != before {
			t.Fatalf("%s changed the folder while frozen: %s, before it %s", c.name, frozen, before)
		}
		if after := listing(t, dir); after == before {
			t.Fatalf("%s changed nothing", c.name)
		}
	}
}

// TestTreeMountsSeeChanges: a mount of the folder shows each change of a
// tree call as soon as the call returns, whatever its kernel cached.
func TestTreeMountsSeeChanges(t *testing.T) {
	ctx := context.Background()
	hub, backing, mnt, _, _ := sharedMounts(t, HubConfig{})
	f := changesOf(t, hub, backing)
	a := RunActor("r")
	ag := startAgent(t, hub, "", mnt)
	if rc := ag.do(t, "mkdir -p d/e && echo x > d/e/f && ls -R d >/dev/null && test ! -e m"); rc != 0 {
		t.Fatalf("setup: %s", ag.err)
	}
	must(t, f.Mkdir(ctx, a, "m", false, 0o700))
	if rc := ag.do(t, "test -d m && test \"$(stat -c %a m)\" = 700"); rc != 0 {
		t.Errorf("the mount does not show the new folder: %s", ag.err)
	}
	if _, err := f.Rename(ctx, a, "d/e/f", "m/f", false); err != nil {
		t.Fatal(err)
	}
	if rc := ag.do(t, "test ! -e d/e/f && test \"$(cat m/f)\" = x"); rc != 0 {
		t.Errorf("the mount does not show the rename: %s", ag.err)
	}
	if _, _, err := f.WriteFrom(ctx, a, "m/f", strings.NewReader("y\n"), nil); err != nil {
		t.Fatal(err)
	}
	if rc := ag.do(t, "test \"$(cat m/f)\" = y"); rc != 0 {
		t.Errorf("the mount does not show the streamed content: %s", ag.err)
	}
	if _, err := f.Remove(ctx, a, "d", true); err != nil {
		t.Fatal(err)
	}
	if rc := ag.do(t, "test ! -e d && ! ls | grep -qx d"); rc != 0 {
		t.Errorf("the mount still shows the removed tree: %s", ag.err)
	}
}
