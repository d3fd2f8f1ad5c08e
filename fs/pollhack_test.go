package fs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestCloseFuseDevicesTouchesNothingElse: the poll hack's thread, with a
// descriptor table of its own, closes its copies of /dev/fuse and leaves
// every other descriptor open: a file, and a folder opened O_PATH as the
// roots of the daemon's other mounts are (closeFuseDevices tells them
// apart by the name the kernel gives, never by an fstat, which for a root
// of this daemon's own mount would be a request to itself).
func TestCloseFuseDevicesTouchesNothingElse(t *testing.T) {
	testenv.RequireRootFUSE(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		fuseOpen, plainOpen, pathOpen bool
		err                           error
	}
	var r result
	r.err = onThreadWithOwnFiles(func() error {
		if unix.Gettid() == unix.Getpid() {
			// A copy of the main thread's table would outlive the test
			// and hide every later descriptor from /proc/self/fd.
			return errors.New("running on the main thread")
		}
		fuseFd, err := unix.Open("/dev/fuse", unix.O_RDWR, 0) // no O_CLOEXEC, as go-fuse's
		if err != nil {
			return err
		}
		plainFd, err := unix.Open(plain, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(plainFd)
		pathFd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(pathFd)
		if err := closeFuseDevices(); err != nil {
			return err
		}
		open := func(fd int) bool { _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); return err == nil }
		r.fuseOpen, r.plainOpen, r.pathOpen = open(fuseFd), open(plainFd), open(pathFd)
		return nil
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.fuseOpen {
		t.Error("the /dev/fuse descriptor is still open")
	}
	if !r.plainOpen || !r.pathOpen {
		t.Errorf("other descriptors closed: file open %v, O_PATH folder open %v", r.plainOpen, r.pathOpen)
	}
}
