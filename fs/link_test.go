package fs

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestLinkCheckLongNames: below 20 folders of 250-byte names, a joined
// path is far past PATH_MAX. The check walks one name at a time, as the
// kernel does, so a chain through those folders that climbs out is seen.
func TestLinkCheckLongNames(t *testing.T) {
	quiet := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	backing, mnt := mountTemp(t, Options{Logger: quiet})
	names := testenv.LongNames(20)
	fds := testenv.NestedDirs(t, mnt, names)
	// up climbs exactly to the root: allowed.
	must(t, unix.Symlinkat(strings.Repeat("../", 20), fds[20], "up"))
	buf := make([]byte, 256)
	if _, err := unix.Readlinkat(fds[20], "up", buf); err != nil {
		t.Errorf("readlink up: %v", err)
	}
	// m goes through up and climbs on: out.
	out := strings.Join(names[10:], "/") + "/up/../x"
	wantErrno(t, "symlink through the long names", unix.Symlinkat(out, fds[10], "m"), syscall.EPERM)
	// One that stays inside is made.
	must(t, unix.Symlinkat(strings.Join(names[10:], "/")+"/up/x", fds[10], "ok"))
	// Planted behind the filesystem's back, it is refused when read.
	bfds := testenv.NestedDirs(t, backing, names)
	must(t, unix.Symlinkat(out, bfds[10], "planted"))
	_, err := unix.Readlinkat(fds[10], "planted", buf)
	wantErrno(t, "readlink of the planted link", err, syscall.EPERM)
}

// TestSymlinkHasOneName: the kernel follows a symlink from the folder it
// came through, so a symlink gets no second name, and one found with two
// (planted behind the filesystem's back) is refused when read.
func TestSymlinkHasOneName(t *testing.T) {
	backing, mnt := mountTemp(t, Options{})
	must(t, os.MkdirAll(filepath.Join(mnt, "a", "b"), 0o755))
	must(t, os.MkdirAll(filepath.Join(mnt, "a", "s"), 0o755))
	must(t, os.Symlink("../..", filepath.Join(mnt, "a", "b", "up"))) // the root
	err := os.Link(filepath.Join(mnt, "a", "b", "up"), filepath.Join(mnt, "a", "s", "up2"))
	wantErrno(t, "hard link of a symlink", err, syscall.EPERM)
	// A hard link of a file is fine.
	must(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("f"), 0o644))
	must(t, os.Link(filepath.Join(mnt, "f"), filepath.Join(mnt, "a", "f")))

	must(t, os.Link(filepath.Join(backing, "a", "b", "up"), filepath.Join(backing, "up2")))
	for _, p := range []string{"up2", "a/b/up"} {
		_, err := os.Readlink(filepath.Join(mnt, p))
		wantErrno(t, "readlink "+p+" with two names", err, syscall.EPERM)
	}
	// A symlink with one name reads as ever.
	must(t, os.Symlink("..", filepath.Join(mnt, "a", "b", "one")))
	if got, err := os.Readlink(filepath.Join(mnt, "a", "b", "one")); err != nil || got != ".." {
		t.Errorf("readlink a/b/one: %q, %v", got, err)
	}
}

// TestFolderMoveCarriesLinks: a folder moved to another parent carries
// its links with it; each is judged from its new place before the move.
func TestFolderMoveCarriesLinks(t *testing.T) {
	quiet := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	_, mnt := mountTemp(t, Options{Logger: quiet})
	p := func(s string) string { return filepath.Join(mnt, s) }
	must(t, os.MkdirAll(p("a/b/c/d"), 0o755))
	must(t, os.MkdirAll(p("a/b/e"), 0o755))
	must(t, os.MkdirAll(p("t"), 0o755))
	// From a/b/c/d, four levels down, this climbs exactly to the root.
	must(t, os.Symlink("../../../../x", p("a/b/c/d/l")))
	// Inner links that stay in the tree move freely.
	must(t, os.Symlink("../d/l", p("a/b/c/d/inner")))

	// To the top, l would climb three levels above the root.
	wantErrno(t, "move a/b/c to /c", os.Rename(p("a/b/c"), p("c")), syscall.EPERM)
	wantErrno(t, "move a/b/c to /t/c", os.Rename(p("a/b/c"), p("t/c")), syscall.EPERM)
	// Swapped with /t, it would be at the top too.
	wantErrno(t, "exchange a/b/c and /t",
		unix.Renameat2(unix.AT_FDCWD, p("a/b/c"), unix.AT_FDCWD, p("t"), unix.RENAME_EXCHANGE), syscall.EPERM)
	if _, err := os.Lstat(p("a/b/c/d/l")); err != nil {
		t.Fatalf("the refused moves moved the link: %v", err)
	}
	// Deeper is fine; so is a rename in place.
	must(t, os.Rename(p("a/b/c"), p("a/b/e/c")))
	must(t, os.Rename(p("a/b/e/c"), p("a/b/e/c2")))
	must(t, os.Rename(p("a/b/e/c2"), p("a/b/c")))

	// The walk climbs from the new place: from a/b, "../w" is missing;
	// from t, w leads to the root, and the last ".." above it.
	must(t, os.MkdirAll(p("a/b/X"), 0o755))
	must(t, os.Symlink("../w/..", p("a/b/X/l")))
	must(t, os.Symlink("..", p("t/w")))
	wantErrno(t, "move a/b/X to /t/X", os.Rename(p("a/b/X"), p("t/X")), syscall.EPERM)
	must(t, os.Remove(p("t/w")))
	must(t, os.Rename(p("a/b/X"), p("t/X")))

	// A tree deeper than the walk's bound is refused with EXDEV, so mv
	// copies it (and every link is made again, and checked).
	deep := p("deep")
	names := make([]string, maxMovedDepth+1)
	for i := range names {
		names[i] = "d"
	}
	must(t, os.Mkdir(deep, 0o755))
	testenv.NestedDirs(t, deep, names)
	wantErrno(t, "move a tree deeper than the bound", os.Rename(deep, p("t/deep")), syscall.EXDEV)
	// A rename in place is not walked.
	must(t, os.Rename(deep, p("deep2")))
}
