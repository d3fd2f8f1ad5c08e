package fs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// outsideSecret makes a file outside any root whose content must never be
// read through a mount, and returns its path.
func outsideSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("TOP-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got error %v, want %v", what, err, want)
	}
}

func TestSymlinkBoundary(t *testing.T) {
	var refusals atomic.Int32
	_, mnt := mountTemp(t, Options{Name: "t/boundary", OnRefusal: func(Refusal) { refusals.Add(1) }})
	must(t, os.MkdirAll(filepath.Join(mnt, "d", "e"), 0o755))
	// Links that stay inside are made as asked.
	for _, c := range []struct{ dir, target string }{
		{"", "d/e"},
		{"d", "../d/e"},
		{"d/e", "../../d"},
		{"d", ".."},   // the root itself
		{"d/e", "x"},  // does not exist yet
		{"", "./d/."}, // dots
	} {
		name := filepath.Join(mnt, c.dir, "ok-"+filepath.Base(c.target)+"-link")
		if err := os.Symlink(c.target, name); err != nil {
			t.Errorf("symlink %q in %q: %v, want it made", c.target, c.dir, err)
			continue
		}
		got, err := os.Readlink(name)
		if err != nil || got != c.target {
			t.Errorf("readlink %s: got %q, %v; want %q", name, got, err, c.target)
		}
	}
	// Links that lead out are refused with EPERM, and nothing is made.
	must(t, os.Symlink(".", filepath.Join(mnt, "here"))) // a link to the root
	for _, c := range []struct{ dir, target string }{
		{"", "/etc/passwd"},
		{"", "/"},
		{"", ".."},
		{"", "../other-thread"},
		{"d", "../.."},
		{"d/e", "../../../x"},
		{"", "d/../../x"},
		{"", "here/.."},         // through a link to the root
		{"", "d/ok-..-link/.."}, // d/ok-..-link is d/.. = the root
		{"d", "../here/../x"},
	} {
		name := filepath.Join(mnt, c.dir, "bad")
		err := os.Symlink(c.target, name)
		wantErrno(t, "symlink "+c.target+" in /"+c.dir, err, syscall.EPERM)
		if _, err := os.Lstat(name); !os.IsNotExist(err) {
			t.Errorf("refused link %s exists: %v", name, err)
			os.Remove(name)
		}
	}
	if refusals.Load() == 0 {
		t.Errorf("no refusal was reported")
	}
}

func TestPlantedLinksRefused(t *testing.T) {
	secret := outsideSecret(t)
	backing, mnt := mountTemp(t, Options{})
	must(t, os.MkdirAll(filepath.Join(backing, "sub"), 0o755))
	// Links planted behind the filesystem's back.
	must(t, os.Symlink(secret, filepath.Join(backing, "abs")))
	must(t, os.Symlink("../../../../../../../../.."+secret, filepath.Join(backing, "sub", "climb")))
	must(t, os.Symlink(".", filepath.Join(backing, "self")))
	must(t, os.Symlink("self/../"+filepath.Base(filepath.Dir(backing)), filepath.Join(backing, "chain")))
	must(t, os.Symlink(filepath.Dir(secret), filepath.Join(backing, "dirlink")))
	for _, name := range []string{"abs", "sub/climb", "chain", "dirlink"} {
		p := filepath.Join(mnt, name)
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("lstat %s: %v; the link itself may be seen", name, err)
		}
		_, err := os.Readlink(p)
		wantErrno(t, "readlink "+name, err, syscall.EPERM)
		// The mount is nosymfollow: the kernel does not even ask.
		_, err = os.ReadFile(p)
		wantErrno(t, "read through "+name, err, syscall.ELOOP)
	}
	_, err := os.ReadFile(filepath.Join(mnt, "dirlink", "secret"))
	wantErrno(t, "read through a planted directory link", err, syscall.ELOOP)
	// Creating through a planted link makes nothing outside.
	outside := filepath.Join(filepath.Dir(secret), "planted-new")
	must(t, os.Symlink(outside, filepath.Join(backing, "trap")))
	err = os.WriteFile(filepath.Join(mnt, "trap"), []byte("x"), 0o644)
	if err == nil {
		t.Errorf("write through a planted link succeeded")
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("a file was created outside the root: %v", err)
	}
}

func TestRenameMovingLinkOut(t *testing.T) {
	_, mnt := mountTemp(t, Options{})
	must(t, os.MkdirAll(filepath.Join(mnt, "a", "b"), 0o755))
	must(t, os.Symlink("../x", filepath.Join(mnt, "a", "b", "l"))) // a/x: inside
	err := os.Rename(filepath.Join(mnt, "a", "b", "l"), filepath.Join(mnt, "l"))
	wantErrno(t, "rename a/b/l to /l", err, syscall.EPERM)
	if _, err := os.Lstat(filepath.Join(mnt, "a", "b", "l")); err != nil {
		t.Errorf("the refused link moved away: %v", err)
	}
	// A move that keeps it inside is fine; so is a rename in place.
	must(t, os.Rename(filepath.Join(mnt, "a", "b", "l"), filepath.Join(mnt, "a", "b", "l2")))
	must(t, os.MkdirAll(filepath.Join(mnt, "c", "d"), 0o755))
	must(t, os.Rename(filepath.Join(mnt, "a", "b", "l2"), filepath.Join(mnt, "c", "d", "l")))
	// A hard link of the link into the root would lead out too.
	err = os.Link(filepath.Join(mnt, "c", "d", "l"), filepath.Join(mnt, "hl"))
	wantErrno(t, "hard link of a link to /", err, syscall.EPERM)
}

func TestHardLinkFromOutside(t *testing.T) {
	secret := outsideSecret(t)
	_, mnt := mountTemp(t, Options{})
	err := os.Link(secret, filepath.Join(mnt, "stolen"))
	wantErrno(t, "hard link of an outside file", err, syscall.EXDEV)
	must(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("in"), 0o644))
	must(t, os.Link(filepath.Join(mnt, "f"), filepath.Join(mnt, "g")))
	if b, err := os.ReadFile(filepath.Join(mnt, "g")); err != nil || string(b) != "in" {
		t.Errorf("hard link inside: got %q, %v", b, err)
	}
}

func TestDeviceNodesRefused(t *testing.T) {
	_, mnt := mountTemp(t, Options{})
	err := syscall.Mknod(filepath.Join(mnt, "null"), syscall.S_IFCHR|0o666, 1<<8|3)
	wantErrno(t, "mknod a char device", err, syscall.EPERM)
	must(t, syscall.Mknod(filepath.Join(mnt, "fifo"), syscall.S_IFIFO|0o644, 0))
}

// TestSymlinkSwapDuringLookup swaps a directory of the backing folder for
// a link to the outside, again and again, while readers go through the
// mount. The daemon opens each name with O_NOFOLLOW below the descriptor of
// its parent, so no reader ever gets the outside file.
func TestSymlinkSwapDuringLookup(t *testing.T) {
	secret := outsideSecret(t)
	quiet := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	backing, mnt := mountTemp(t, Options{Logger: quiet, EntryTimeout: -1, AttrTimeout: -1, NegativeTimeout: -1})
	real := filepath.Join(backing, "real")
	must(t, os.MkdirAll(real, 0o755))
	must(t, os.WriteFile(filepath.Join(real, "secret"), []byte("inside"), 0o644))
	must(t, os.Symlink(filepath.Dir(secret), filepath.Join(backing, "evil")))
	swap := filepath.Join(backing, "dir")
	must(t, os.Symlink("real", swap))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(backing, "swap.tmp")
			target := "real"
			if i%2 == 1 {
				target = filepath.Dir(secret)
			}
			os.Remove(tmp)
			if err := os.Symlink(target, tmp); err == nil {
				os.Rename(tmp, swap)
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(mnt, "dir", "secret"))
		if err == nil {
			reads++
			if string(b) != "inside" {
				close(stop)
				wg.Wait()
				t.Fatalf("read %q through the mount: the swap walked out of the root", b)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads went through, none outside", reads)
}

func TestReadOnlyMount(t *testing.T) {
	backing, mnt := mountTemp(t, Options{ReadOnly: true})
	must(t, os.WriteFile(filepath.Join(backing, "f"), []byte("data"), 0o644))
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "data" {
		t.Fatalf("read: got %q, %v", b, err)
	}
	wantErrno(t, "write", os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644), syscall.EROFS)
	wantErrno(t, "create", os.WriteFile(filepath.Join(mnt, "g"), []byte("x"), 0o644), syscall.EROFS)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(mnt, "d"), 0o755), syscall.EROFS)
	wantErrno(t, "remove", os.Remove(filepath.Join(mnt, "f")), syscall.EROFS)
	wantErrno(t, "symlink", os.Symlink("f", filepath.Join(mnt, "l")), syscall.EROFS)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
