package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// FuseType is the filesystem type of every mount Serve makes, as the
// mount table shows it.
const FuseType = "fuse.warren"

// fusectlDir is where the kernel's FUSE control filesystem shows one
// folder per live connection, named by the minor of the mounts' device.
const fusectlDir = "/sys/fs/fuse/connections"

// MountsUnder returns the mounts of this package (FuseType) attached at or
// below dir in this process's mount namespace, deepest first, so that they
// can be detached in that order. It reads the mount table only: a mount
// whose server is gone or stuck is listed without being asked anything.
func MountsUnder(dir string) ([]MountEntry, error) {
	dir = filepath.Clean(dir)
	var out []MountEntry
	err := scanMountTable(func(e MountEntry) bool {
		if e.FSType == FuseType && (e.Path == dir || strings.HasPrefix(e.Path, dir+"/")) {
			out = append(out, e)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	// Deepest first; of mounts stacked at one path, the topmost (the
	// later line) first.
	slices.Reverse(out)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Path) > len(out[j].Path) })
	return out, nil
}

// AbortConnection aborts the FUSE connection of mount e through fusectl
// (/sys/fs/fuse/connections/N/abort, N the minor of its device), mounting
// fusectl there first if it is not. Every request waiting on the
// connection then fails, and every later one fails with ENOTCONN: this is
// what frees a process stuck waiting on a server that is gone or stuck (a
// killed daemon's thread waiting on its own mount keeps the daemon a
// zombie holding every descriptor). It returns false if the connection was
// not alive any more (its folder is gone).
func AbortConnection(e MountEntry) (bool, error) {
	_, minor, ok := strings.Cut(e.Dev, ":")
	if !ok || minor == "" || strings.ContainsAny(minor, "/.") {
		return false, fmt.Errorf("fs: abort connection of %s: bad device %q", e.Path, e.Dev)
	}
	if err := mountFusectl(); err != nil {
		return false, err
	}
	err := os.WriteFile(filepath.Join(fusectlDir, minor, "abort"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fs: abort connection %s of %s: %w", minor, e.Path, err)
	}
	return true, nil
}

// mountFusectl mounts the FUSE control filesystem at its usual place if it
// is not mounted there.
func mountFusectl() error {
	mounted, err := IsMountpoint(fusectlDir)
	if err != nil || mounted {
		return err
	}
	if err := unix.Mount("fusectl", fusectlDir, "fusectl", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("fs: mount fusectl at %s: %w", fusectlDir, err)
	}
	return nil
}

// DetachUnder aborts the connection of every mount of this package at or
// below dir and detaches it, deepest first: at a start, every such mount
// under the daemon's own mount folder was left by a former run (a daemon
// holds its data folder alone), and its server is dead or stuck. Aborting
// first means no process still inside one hangs on it. It returns the
// mounts it took down.
func DetachUnder(dir string) ([]MountEntry, error) {
	ms, err := MountsUnder(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range ms {
		if _, err := AbortConnection(e); err != nil {
			errs = append(errs, err)
		}
		if err := unix.Unmount(e.Path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("fs: detach %s: %w", e.Path, err))
		}
	}
	return ms, errors.Join(errs...)
}
