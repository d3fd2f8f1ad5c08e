package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LoopFS makes a small filesystem of its own for a test: an image file of
// size bytes in a temporary folder, formatted by mkfs (e.g. "mkfs.btrfs"
// with mkfsArgs), attached to a loop device and mounted with opts. It
// returns the mount point. The test's cleanup, which also runs on failure,
// detaches every mount below the mount point and the mount itself, and
// detaches the loop device.
//
// Tests use it to fill a disk without touching the machine's own.
func LoopFS(t testing.TB, size int64, mkfs string, mkfsArgs []string, opts string) string {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, mkfs)
	RequireCommand(t, "losetup")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		CannotRun(t, "this test needs loop devices: %v", err)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, append(append([]string{}, mkfsArgs...), img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", mkfs, img, err, out)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v\n%s", img, err, out)
	}
	dev := strings.TrimSpace(string(out))
	// Registered before the mount, so a failed mount still frees the
	// device; cleanups run last-in first-out, so the unmount below runs
	// before it.
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v\n%s", dev, err, out)
		}
	})
	fstype := strings.TrimPrefix(filepath.Base(mkfs), "mkfs.")
	if err := unix.Mount(dev, mnt, fstype, 0, opts); err != nil {
		t.Fatalf("mount %s (%s, %q) at %s: %v", dev, fstype, opts, mnt, err)
	}
	t.Cleanup(func() {
		// Whatever a failed test left mounted below (FUSE mounts of a
		// daemon), deepest first, then the filesystem itself.
		mps := MountsUnder(t, mnt)
		for i := len(mps) - 1; i >= 0; i-- {
			if mps[i] == mnt {
				continue
			}
			unix.Unmount(mps[i], unix.MNT_DETACH)
		}
		if err := unix.Unmount(mnt, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			// Busy: a process of the test still holds it. Detach
			// lazily so the loop device frees when it lets go.
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	return mnt
}

// FillDisk fills the filesystem of dir, as root (so ext4's root reserve
// goes too), with one file it returns: fallocate in halving chunks, then
// single blocks written, until the disk refuses even those.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for chunk := int64(1 << 30); chunk >= 4096; {
		err := unix.Fallocate(int(f.Fd()), 0, off, chunk)
		if err == nil {
			off += chunk
			continue
		}
		if !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("fill %s: fallocate: %v", path, err)
		}
		chunk /= 2
	}
	block := make([]byte, 4096)
	for {
		if _, err := f.WriteAt(block, off); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill %s: write: %v", path, err)
			}
			break
		}
		off += 4096
	}
	f.Sync()
	return path
}

// UnsealMountPoints clears the immutable flag that a daemon sets on its
// mount-point folders (DATA/mnt/TENANT/THREAD), so that the test's
// temporary folder can be removed. Call it once the daemon is stopped and
// its mounts detached.
func UnsealMountPoints(t testing.TB, dataDir string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dataDir, "mnt", "*", "*"))
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS); err == nil && flags&immutableFL != 0 {
			if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags&^immutableFL)); err != nil {
				t.Errorf("clear the immutable flag of %s: %v", p, err)
			}
		}
		unix.Close(fd)
	}
}

// immutableFL is FS_IMMUTABLE_FL of <linux/fs.h>.
const immutableFL = 0x00000010

// LoopDevicesUnder lists the loop devices (/dev/loopN) attached to a file
// at or below dir, from /sys/block/loop*/loop/backing_file: a test looks
// only at devices of its own files, never at the machine's others.
func LoopDevicesUnder(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if atOrBelow(dir, strings.TrimSpace(string(b))) {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs
}

// WriteUntil writes path in 1 MiB steps until want bytes are written or a
// write fails (a quota's EDQUOT, a full disk's ENOSPC), and returns the
// bytes written and the error; the file is synced once whole.
func WriteUntil(path string, want int64) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for n < want {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, f.Sync()
}
