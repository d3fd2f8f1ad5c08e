package fs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The pieces of the file API's atomic replacement (files.go: store).

// tempFile is new content on its way to a name in a folder. It is made
// unnamed (O_TMPFILE) where the filesystem allows, so a crash before
// replace leaves nothing behind; it gets a hidden random name only for
// the instant between its link and the rename over the target.
type tempFile struct {
	temps *tempFiles
	key   tempKey
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

// tempKey names a temporary file: its folder's device and inode, and its
// name.
type tempKey struct {
	dev, dir uint64
	name     string
}

// tempFiles knows the temporary files of the file API that are in use, so
// that the sweep of what a crash left never removes one of them, and the
// folders swept since the start.
type tempFiles struct {
	mu    sync.Mutex
	live  map[tempKey]struct{}
	swept map[[2]uint64]struct{}
}

// maxSwept bounds the folders remembered as swept; past it they are
// forgotten, and swept again at their next write.
const maxSwept = 1 << 16

// newTemp makes a temporary file in the folder dirFd (dirSt), mode 0600
// until the caller sets the real one.
func (ts *tempFiles) newTemp(dirFd int, dirSt *syscall.Stat_t) (*tempFile, error) {
	t := &tempFile{temps: ts, dirFd: dirFd, fd: -1, name: tempName()}
	t.key = tempKey{dirSt.Dev, dirSt.Ino, t.name}
	// Known before its name can exist in the folder.
	ts.mu.Lock()
	if ts.live == nil {
		ts.live = make(map[tempKey]struct{})
	}
	ts.live[t.key] = struct{}{}
	ts.mu.Unlock()
	fd, err := t.open()
	if err != nil {
		t.forget()
		return nil, err
	}
	t.fd = fd
	return t, nil
}

func (t *tempFile) forget() {
	t.temps.mu.Lock()
	delete(t.temps.live, t.key)
	t.temps.mu.Unlock()
}

// open opens the file: unnamed if the filesystem allows.
func (t *tempFile) open() (int, error) {
	dirFd := t.dirFd
	fd, err := unix.Openat(dirFd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	switch err {
	case nil:
		return fd, nil
	case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
		// No O_TMPFILE here: a named one.
	default:
		return -1, err
	}
	fd, err = unix.Openat(dirFd, t.name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	t.named = true
	return fd, nil
}

// replace gives the file the name name in the folder dirFd (dirSt),
// atomically in place of what was there. The folder may be another than
// the one it was made in (an upload resolves its path again at its end),
// on the same filesystem.
func (t *tempFile) replace(dirFd int, dirSt *syscall.Stat_t, name string) error {
	if !t.named {
		if t.dirFd != dirFd {
			t.move(dirFd, dirSt)
		}
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
	if err := unix.Renameat(t.dirFd, t.name, dirFd, name); err != nil {
		return fmt.Errorf("rename the new content over the old: %w", err)
	}
	t.named, t.done = false, true
	return nil
}

// move makes the folder dirFd (dirSt), borrowed, the one an unnamed file
// will be linked into: its key moves there before its name can exist, so
// that a sweep of that folder leaves it.
func (t *tempFile) move(dirFd int, dirSt *syscall.Stat_t) {
	key := tempKey{dirSt.Dev, dirSt.Ino, t.name}
	ts := t.temps
	ts.mu.Lock()
	delete(ts.live, t.key)
	ts.live[key] = struct{}{}
	ts.mu.Unlock()
	t.key, t.dirFd = key, dirFd
}

// discard closes the file and, unless it replaced its target, removes it.
func (t *tempFile) discard() {
	if t.named && !t.done {
		unix.Unlinkat(t.dirFd, t.name, 0)
	}
	unix.Close(t.fd)
	t.forget()
}

// sweep removes, once per folder and run of the daemon, the temporary
// files that a crash left in the folder dirFd (dirSt): a write killed
// between the link of its new content and the rename. Such a write was
// never acknowledged, and its file is no one's. Called before a write in
// the folder; what it removes is told to the mounts and logged.
func (h *Hub) sweepTemps(dirFd int, dirSt *syscall.Stat_t, label string) {
	ts := &h.temps
	dk := [2]uint64{dirSt.Dev, dirSt.Ino}
	ts.mu.Lock()
	_, done := ts.swept[dk]
	if !done {
		if ts.swept == nil || len(ts.swept) >= maxSwept {
			ts.swept = make(map[[2]uint64]struct{})
		}
		ts.swept[dk] = struct{}{}
	}
	ts.mu.Unlock()
	if done {
		return
	}
	fd, err := unix.Openat(dirFd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	dir := os.NewFile(uintptr(fd), "folder")
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	for _, name := range names {
		if !strings.HasPrefix(name, tempPrefix) {
			continue
		}
		var st syscall.Stat_t
		// A file's new content, or a restore's new link.
		if fstatat(dirFd, name, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG && st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			continue
		}
		// Under the lock: a temporary file in use is in live before
		// its name exists.
		ts.mu.Lock()
		_, inUse := ts.live[tempKey{dirSt.Dev, dirSt.Ino, name}]
		if !inUse {
			err = unix.Unlinkat(dirFd, name, 0)
		}
		ts.mu.Unlock()
		if inUse || err != nil {
			continue
		}
		h.changed(dirSt.Dev, st.Ino, dirSt.Ino, name)
		h.log.Info("removed the temporary file of a write that a crash interrupted", "workspace", label, "name", name)
	}
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

// IsTempName reports whether name is that of a temporary file of the file
// API or of a restore: a checkpoint leaves such files out.
func IsTempName(name string) bool { return strings.HasPrefix(name, tempPrefix) }
