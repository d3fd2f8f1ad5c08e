package fs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"golang.org/x/sys/unix"
)

// The pieces of the file API's atomic replacement (files.go: store).

// tempFile is new content on its way to a name in a folder. It is made
// unnamed (O_TMPFILE) where the filesystem allows, so a crash before
// replace leaves nothing behind; it gets a hidden random name only for
// the instant between its link and the rename over the target.
type tempFile struct {
	dirFd int // the folder, borrowed
	fd    int // open for writing
	name  string
	named bool // name exists in the folder and is ours to remove
	done  bool
}

// tempPrefix starts the name of every temporary file; a crash between
// the link and the rename (or, without O_TMPFILE, during the write)
// leaves one such file. docs/operations.md names it.
const tempPrefix = ".warren-write-"

func tempName() string {
	var b [8]byte
	rand.Read(b[:])
	return tempPrefix + hex.EncodeToString(b[:])
}

// newTemp makes a temporary file in the folder dirFd, mode 0600 until the
// caller sets the real one.
func newTemp(dirFd int) (*tempFile, error) {
	t := &tempFile{dirFd: dirFd, fd: -1, name: tempName()}
	fd, err := unix.Openat(dirFd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	switch err {
	case nil:
		t.fd = fd
		return t, nil
	case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
		// No O_TMPFILE here: a named one.
	default:
		return nil, err
	}
	fd, err = unix.Openat(dirFd, t.name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	t.fd, t.named = fd, true
	return t, nil
}

// replace gives the file the name name in its folder, atomically in place
// of what was there.
func (t *tempFile) replace(name string) error {
	if !t.named {
		// linkat with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the
		// /proc/self/fd link works for anyone.
		err := unix.Linkat(t.fd, "", t.dirFd, t.name, unix.AT_EMPTY_PATH)
		if err == unix.EPERM || err == unix.ENOENT {
			err = unix.Linkat(unix.AT_FDCWD, procFdPath(t.fd), t.dirFd, t.name, unix.AT_SYMLINK_FOLLOW)
		}
		if err != nil {
			return fmt.Errorf("link the new content: %w", err)
		}
		t.named = true
	}
	if err := unix.Renameat(t.dirFd, t.name, t.dirFd, name); err != nil {
		return fmt.Errorf("rename the new content over the old: %w", err)
	}
	t.named, t.done = false, true
	return nil
}

// discard closes the file and, unless it replaced its target, removes it.
func (t *tempFile) discard() {
	if t.named && !t.done {
		unix.Unlinkat(t.dirFd, t.name, 0)
	}
	unix.Close(t.fd)
}

// syncDir fsyncs the folder behind the (maybe O_PATH) descriptor dirFd,
// so that the entries made or renamed in it survive a power loss.
func syncDir(dirFd int) error {
	fd, err := unix.Openat(dirFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fsyncRetry(fd)
}

func fsyncRetry(fd int) error {
	for {
		err := unix.Fsync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

// writeAll writes b at the descriptor's offset.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// pwriteAll writes b from offset 0.
func pwriteAll(fd int, b []byte) error {
	var off int64
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
