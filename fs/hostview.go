package fs

import (
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// A host's view of a workspace (the thread's mount path, inspection
// mounts) is mounted nosymfollow: the kernel follows no symlink in it, and
// answers ELOOP instead. An agent makes the links, and where the kernel's
// walk of a link ends depends on things no check at readlink time can pin
// (link.go); a root process on the host that followed one could read or
// write anything. Links are still there, and read as links; the file API
// follows them inside the root. The jail binds the mount without the flag.

// requireNoSymfollow checks that the mount just made at mountpoint is
// nosymfollow, and takes it down if not: the flag is what keeps a host
// process from following an agent's link out of the workspace, so a mount
// without it (made by fusermount, which does not pass it, or on a kernel
// older than 5.10) is not served.
func requireNoSymfollow(server *fuse.Server, mountpoint string) error {
	var s unix.Statfs_t
	err := unix.Statfs(mountpoint, &s)
	if err == nil && s.Flags&stNoSymfollow != 0 {
		return nil
	}
	if uerr := server.Unmount(); uerr != nil {
		unix.Unmount(mountpoint, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("check the mount is nosymfollow: %w", err)
	}
	return errors.New("the mount is not nosymfollow (mount(2) as root on Linux 5.10 or later is needed; fusermount cannot set it)")
}

// stNoSymfollow is ST_NOSYMFOLLOW, the statfs flag of a nosymfollow mount.
const stNoSymfollow = 0x2000
