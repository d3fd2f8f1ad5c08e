package jail

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock, where the kernel has it, is the jail's second fence: whatever
// a mount would allow, a command writes only beneath /workspace, /tmp and
// /dev/shm (and to the devices of /dev), and it reaches no abstract unix
// socket and signals no process outside the jail's Landlock domain. The
// read-only binds and the seccomp filter already close the rest of the
// tree; Landlock also closes what those leave writable by design, such as
// the files of the jail's own /proc, and the host's abstract sockets when
// the jail shares the host's network. The rules are the same on an
// image's root as on the host's folders.

// landlockWritable are the folders commands may change, with what they
// may do beneath each.
func landlockWritable(abi int) (handled uint64, rules map[string]uint64) {
	handled = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	if abi >= 2 {
		handled |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	tree := handled &^ (unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	devices := uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE)
	if abi >= 3 {
		devices |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return handled, map[string]uint64{Workspace: tree, Tmp: tree, Home: tree, "/dev/shm": tree, "/dev": devices}
}

// applyLandlock restricts this thread (and what it starts) as above. It
// returns the Landlock ABI applied; 0 if the kernel has none.
func applyLandlock() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		if errno == unix.ENOSYS || errno == unix.EOPNOTSUPP {
			return 0, nil
		}
		return 0, fmt.Errorf("landlock version: %w", errno)
	}
	abi := int(v)
	handled, rules := landlockWritable(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	size := unsafe.Offsetof(attr.Scoped) // the ABI 1 to 5 layout
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
		size = unsafe.Offsetof(attr.Quiet_access_fs)
	}
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return 0, fmt.Errorf("landlock ruleset: %w", errno)
	}
	defer unix.Close(int(rfd))
	for dir, access := range rules {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("landlock rule for %s: %w", dir, err)
		}
		pb := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rfd, unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		unix.Close(fd)
		if errno != 0 {
			return 0, fmt.Errorf("landlock rule for %s: %w", dir, errno)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rfd, 0, 0); errno != 0 {
		return 0, fmt.Errorf("landlock restrict: %w", errno)
	}
	return abi, nil
}
