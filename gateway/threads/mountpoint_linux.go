package threads

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/fs"
	"warren/meta"
)

// Unserved mount points refuse writes. A thread's mount point is a bare
// folder whenever its mount is not there: after a stop or a crash, after
// close, and between the detach of a dead mount and the new mount at a
// restart. A write there (by root too) would land in the bare folder, and
// the next mount would cover it: acknowledged, then hidden. So every
// mount-point folder is immutable (FS_IMMUTABLE_FL, `chattr +i`) from the
// moment it is made until delete removes it. The flag is on the folder
// under the mount, so the mount works over it and every unmount leaves it
// in place; the kernel then refuses any entry made in it with EPERM,
// whoever asks.
//
// Whatever is found in a mount-point folder before it is mounted (written
// before this daemon sealed its folders, or by someone who cleared the
// flag) is moved aside to DataDir/moved-aside and logged, never covered.
//
// Inspection folders are not sealed: they belong to their users, whom
// warren does not take the folder from; a restart already refuses to
// cover one that is not empty (inspect.go).

// movedAsideDir is the folder, under DataDir, that holds what was found in
// mount points (not "lost+found": the data folder may be the root of a
// filesystem, whose lost+found belongs to fsck).
const movedAsideDir = "moved-aside"

// errSealUnsupported: the filesystem of the mount points has no
// immutable flag.
var errSealUnsupported = errors.New("the filesystem does not support the immutable flag")

// fsImmutableFL is FS_IMMUTABLE_FL of <linux/fs.h>, which x/sys/unix
// does not name.
const fsImmutableFL = 0x00000010

// setImmutable sets or clears FS_IMMUTABLE_FL on the folder path, not
// following a link in its place.
func setImmutable(path string, on bool) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return sealErr(path, err)
	}
	want := flags &^ fsImmutableFL
	if on {
		want = flags | fsImmutableFL
	}
	if want == flags {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(want)); err != nil {
		return sealErr(path, err)
	}
	return nil
}

func sealErr(path string, err error) error {
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("set flags of %s: %w (%w)", path, errSealUnsupported, err)
	}
	return fmt.Errorf("set flags of %s: %w", path, err)
}

// probeSeal tells, at start, whether the mount points' filesystem has the
// immutable flag; if not, the gateway says so once and serves without it.
// The probe is a folder next to mnt/ (on its filesystem), not in it, where
// only mount points go.
func (t *Threads) probeSeal() {
	dir, err := os.MkdirTemp(filepath.Dir(t.mntBase), ".seal-probe-")
	if err != nil {
		t.log.Warn("cannot check whether mount points can be made immutable", "path", t.mntBase, "error", err)
		return
	}
	err = setImmutable(dir, true)
	setImmutable(dir, false)
	os.Remove(dir)
	if errors.Is(err, errSealUnsupported) {
		t.sealOff = true
		t.log.Warn("mount points cannot be made immutable on this filesystem: a write to the mount path of a thread that is not served lands in the bare folder (it is moved aside at the next mount)",
			"path", t.mntBase, "error", err)
	}
}

// prepareMountPoint makes the mount point of thread k ready to be mounted
// on: made if missing, anything found in it moved aside, immutable. It
// must not be mounted (the caller detached what was there). With undo,
// a folder it made is removed again if the operation fails.
func (t *Threads) prepareMountPoint(k meta.ThreadKey, path string, undo *undoStack) error {
	if mounted, err := fs.IsMountpoint(path); err != nil {
		return err
	} else if mounted {
		// Reading it would reach into a mount: refuse rather than cover
		// or disturb it.
		return fmt.Errorf("mount point %s: %w: something is mounted there", path, api.ErrConflict)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	err := os.Mkdir(path, 0o755)
	switch {
	case err == nil:
		if undo != nil {
			undo.pushFolder("remove "+path, func() error { return removeMountPoint(path) })
		}
	case errors.Is(err, os.ErrExist):
		if err := t.moveAside(k, path); err != nil {
			return err
		}
	default:
		return fmt.Errorf("create %s: %w", path, err)
	}
	return t.seal(path)
}

// seal makes the mount point path immutable.
func (t *Threads) seal(path string) error {
	if t.sealOff {
		return nil
	}
	if err := setImmutable(path, true); err != nil {
		return fmt.Errorf("make mount point immutable: %w", err)
	}
	return nil
}

// moveAside moves the existing mount point path of thread k, if anything
// is in it, to DataDir/moved-aside/<time>/<tenant>/<thread> and makes a
// new, empty one in its place.
func (t *Threads) moveAside(k meta.ThreadKey, path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if !fi.IsDir() {
		// Not a folder (planted while the flag was off): it goes aside
		// too, and a folder takes its place.
	} else if empty, err := emptyDir(path); err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	} else if empty {
		return nil
	}
	rel, err := filepath.Rel(t.mntBase, path)
	if err != nil {
		return fmt.Errorf("move aside %s: %w", path, err)
	}
	dest := filepath.Join(t.cfg.DataDir, movedAsideDir, time.Now().UTC().Format("20060102T150405.000000000Z"), rel)
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return fmt.Errorf("move aside %s: %w", path, err)
	}
	if err := os.Chmod(filepath.Join(t.cfg.DataDir, movedAsideDir), 0o700); err != nil {
		return fmt.Errorf("move aside %s: %w", path, err)
	}
	if fi.IsDir() {
		if err := setImmutable(path, false); err != nil && !errors.Is(err, errSealUnsupported) {
			return fmt.Errorf("move aside %s: %w", path, err)
		}
	}
	if err := os.Rename(path, dest); err != nil {
		if fi.IsDir() {
			t.seal(path)
		}
		return fmt.Errorf("move aside %s: %w", path, err)
	}
	t.log.Warn("moved aside what was found in an unserved mount point, which a mount would have covered",
		"tenant", k.Tenant, "thread", k.Thread, "path", path, "moved_to", dest)
	if err := os.Mkdir(path, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// emptyDir reports whether the folder path has no entries.
func emptyDir(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return false, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return true, nil
}

// removeMountPoint removes the (unmounted) mount point path: its flag
// first. If it cannot be removed, it is made immutable again.
func removeMountPoint(path string) error {
	if err := setImmutable(path, false); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, errSealUnsupported) {
			return err
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		setImmutable(path, true)
		return err
	}
	return nil
}

// sealClosed prepares the mount point of the closed thread b at start:
// what is in the folder is moved aside, and the folder is immutable. A
// dead mount a crashed daemon left there (it refuses writes itself) is
// left to the next bind, which detaches it. A failure is logged; the next
// bind prepares the folder again.
func (t *Threads) sealClosed(b meta.Binding) {
	_, mountPath, err := t.Paths(b.ThreadKey)
	if err == nil {
		err = t.prepareMountPoint(b.ThreadKey, mountPath, nil)
	}
	if err != nil {
		t.log.Warn("restore: prepare the mount point of a closed thread", "tenant", b.Tenant, "thread", b.Thread, "error", err)
	}
}
