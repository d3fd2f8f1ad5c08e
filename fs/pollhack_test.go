package fs

import (
	"os"
	"path/filepath"
	"runtime"
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
	done := make(chan result, 1)
	go func() {
		// The thread ends with the goroutine: its table is its own.
		runtime.LockOSThread()
		var r result
		if r.err = unix.Unshare(unix.CLONE_FILES); r.err != nil {
			done <- r
			return
		}
		fuseFd, err := unix.Open("/dev/fuse", unix.O_RDWR, 0) // no O_CLOEXEC, as go-fuse's
		if err != nil {
			r.err = err
			done <- r
			return
		}
		plainFd, err := unix.Open(plain, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			r.err = err
			done <- r
			return
		}
		pathFd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			r.err = err
			done <- r
			return
		}
		r.err = closeFuseDevices()
		open := func(fd int) bool { _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); return err == nil }
		r.fuseOpen, r.plainOpen, r.pathOpen = open(fuseFd), open(plainFd), open(pathFd)
		unix.Close(plainFd)
		unix.Close(pathFd)
		done <- r
	}()
	r := <-done
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
