package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// writeRefused fails the test unless a write by root into the folder
// mount (a file, a folder) is refused with EPERM.
func writeRefused(t *testing.T, when, mount string) {
	t.Helper()
	err := os.WriteFile(filepath.Join(mount, "landed.txt"), []byte("lost?"), 0o644)
	if !errors.Is(err, syscall.EPERM) {
		t.Errorf("%s: write to the mount path: %v, want EPERM", when, err)
	}
	if err := os.Mkdir(filepath.Join(mount, "landed-dir"), 0o755); !errors.Is(err, syscall.EPERM) {
		t.Errorf("%s: mkdir in the mount path: %v, want EPERM", when, err)
	}
}

// served fails the test unless mount serves the thread's workspace: the
// file it holds, and nothing that a refused write could have left.
func served(t *testing.T, when, mount string) {
	t.Helper()
	if got, err := os.ReadFile(filepath.Join(mount, "kept.txt")); err != nil || string(got) != "kept" {
		t.Errorf("%s: kept.txt: %q, %v", when, got, err)
	}
	for _, name := range []string{"landed.txt", "landed-dir"} {
		if _, err := os.Lstat(filepath.Join(mount, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s is in the workspace (%v); the refused write landed somewhere", when, name, err)
		}
	}
}

// TestUnservedMountPathRefusesWrites: a thread's mount path that no mount
// serves refuses writes, even root's, instead of taking them into the
// bare folder that the next mount would cover: after close, after a stop,
// and after a crash, in the window between the detach of the dead mount
// and the new mount of a restart.
func TestUnservedMountPathRefusesWrites(t *testing.T) {
	d := newDaemon(t)
	p := d.bind("default", "u")
	must(t, os.WriteFile(filepath.Join(p, "kept.txt"), []byte("kept"), 0o644))

	d.mustWarren("close", "--thread", "u")
	writeRefused(t, "after close", p)
	d.bind("default", "u")
	served(t, "bound again after close", p)

	d.stop()
	writeRefused(t, "after a stop", p)
	d.start()
	served(t, "after a restart", p)

	d.kill9()
	// What a restart does first: detach the dead mount.
	must(t, unix.Unmount(p, unix.MNT_DETACH))
	writeRefused(t, "after a crash, the dead mount detached", p)
	d.start()
	served(t, "after a restart from a crash", p)

	// Still a folder the daemon can remove: delete works.
	d.mustWarren("delete", "--thread", "u")
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount path after delete: %v, want gone", err)
	}
}

// setImmutable sets or clears the immutable flag of the folder path, as
// `chattr +i` / `chattr -i` would.
func setImmutable(t *testing.T, path string, on bool) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	must(t, err)
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	must(t, err)
	const immutable = 0x10 // FS_IMMUTABLE_FL
	if on {
		flags |= immutable
	} else {
		flags &^= immutable
	}
	must(t, unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)))
}

// TestPlantedFilesMovedAsideAtStart plants files in the mount-point
// folders of a bound and of a closed thread while the daemon is down
// (clearing the flag that refuses them). At start the daemon moves them
// aside to DATA/moved-aside and logs it, rather than cover them with the
// mount; the folders refuse writes again.
func TestPlantedFilesMovedAsideAtStart(t *testing.T) {
	d := newDaemon(t)
	bound := d.bind("default", "b")
	closed := d.bind("default", "c")
	must(t, os.WriteFile(filepath.Join(bound, "kept.txt"), []byte("kept"), 0o644))
	d.mustWarren("close", "--thread", "c")
	d.stop()
	for _, p := range []string{bound, closed} {
		setImmutable(t, p, false)
		must(t, os.WriteFile(filepath.Join(p, "planted.txt"), []byte("planted in "+filepath.Base(p)), 0o644))
	}

	d.start()
	if got, err := os.ReadFile(filepath.Join(bound, "kept.txt")); err != nil || string(got) != "kept" {
		t.Errorf("kept.txt after the start: %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(bound, "planted.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("planted.txt shows in the served workspace: %v", err)
	}
	writeRefused(t, "the closed thread after the start", closed)
	for _, p := range []string{bound, closed} {
		found, _ := filepath.Glob(filepath.Join(d.data, "moved-aside", "*", "default", filepath.Base(p), "planted.txt"))
		if len(found) != 1 {
			t.Errorf("planted.txt of %s in moved-aside: %v, want one", p, found)
			continue
		}
		if got, err := os.ReadFile(found[0]); err != nil || string(got) != "planted in "+filepath.Base(p) {
			t.Errorf("%s: %q, %v", found[0], got, err)
		}
		if logs := d.allLogs(); !strings.Contains(logs, "moved aside") || !strings.Contains(logs, p) {
			t.Errorf("the log does not say that what was in %s was moved aside", p)
		}
	}
	// The closed thread binds again, without the planted file.
	d.bind("default", "c")
	if _, err := os.Lstat(filepath.Join(closed, "planted.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("planted.txt shows in the workspace of c: %v", err)
	}
}
