package fs

import (
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the few raw system calls the filesystem makes on the
// O_PATH descriptors it keeps per inode. Each works on a descriptor and, at
// most, one path component: none of them walks a path, so none can be led
// somewhere else by a symlink swapped in behind our back.

// openChild opens name in the directory dirfd as an O_PATH descriptor
// without following a symlink in its place and without crossing into
// another mount. name is one component, as the kernel hands it to us.
func openChild(dirfd int, name string) (int, error) {
	if errno := checkName(name); errno != 0 {
		return -1, errno
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		// With O_PATH|O_NOFOLLOW a trailing symlink is opened itself,
		// not refused: that is the node we want for it.
		return fd, err
	}
}

// validName reports whether name is a single, real directory entry name.
func validName(name string) bool {
	return checkName(name) == 0
}

// checkName returns 0 for a single, real directory entry name,
// ENAMETOOLONG ("File name too long") for a name longer than NAME_MAX, as
// a local filesystem answers (the kernel hands FUSE names of up to 1024
// bytes), and EINVAL for anything else.
func checkName(name string) syscall.Errno {
	if name == "" || name == "." || name == ".." {
		return syscall.EINVAL
	}
	if len(name) > unix.NAME_MAX {
		return syscall.ENAMETOOLONG
	}
	if strings.ContainsAny(name, "/\x00") {
		return syscall.EINVAL
	}
	return 0
}

// fstat stats the inode behind an O_PATH descriptor itself (a symlink is
// not followed).
func fstat(fd int, st *syscall.Stat_t) error {
	return fstatat(fd, "", st)
}

// fstatat stats name, one component below the directory dirfd, without
// following a symlink in its place; "" stats dirfd itself.
func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	} else if errno := checkName(name); errno != 0 {
		return errno
	}
	var ust unix.Stat_t
	for {
		err := unix.Fstatat(dirfd, name, &ust, flags)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	*st = syscall.Stat_t{
		Dev: ust.Dev, Ino: ust.Ino, Nlink: ust.Nlink, Mode: ust.Mode,
		Uid: ust.Uid, Gid: ust.Gid, Rdev: ust.Rdev, Size: ust.Size,
		Blksize: ust.Blksize, Blocks: ust.Blocks,
		Atim: syscall.Timespec(ust.Atim), Mtim: syscall.Timespec(ust.Mtim), Ctim: syscall.Timespec(ust.Ctim),
	}
	return nil
}

// procFdPath names an O_PATH descriptor in /proc/self/fd. Opening or
// changing that name acts on exactly the inode the descriptor holds (it is
// a "magic link" to it), never on whatever now sits at the inode's old path.
func procFdPath(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// reopen opens the inode behind an O_PATH descriptor for I/O.
func reopen(fd int, flags int) (int, error) {
	flags &^= unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NOCTTY
	for {
		nfd, err := unix.Open(procFdPath(fd), flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		return nfd, err
	}
}

// fchmod changes the mode of the inode behind an O_PATH descriptor.
func fchmod(fd int, mode uint32) error {
	// fchmodat2 (Linux 6.6) takes AT_EMPTY_PATH on an O_PATH descriptor.
	empty, err := unix.BytePtrFromString("")
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(empty)), uintptr(mode), unix.AT_EMPTY_PATH, 0, 0)
	if e == 0 {
		return nil
	}
	if e != unix.ENOSYS && e != unix.EINVAL {
		return e
	}
	return unix.Chmod(procFdPath(fd), mode)
}

// fchown changes the owner of the inode behind an O_PATH descriptor.
func fchown(fd int, uid, gid int) error {
	return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// futimes sets the times of the inode behind an O_PATH descriptor.
func futimes(fd int, ts []unix.Timespec) error {
	return unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// readlinkFd reads the target of the symlink behind an O_PATH descriptor.
func readlinkFd(fd int) (string, error) {
	return readlinkAt(fd, "")
}

// readlinkAt reads the target of the symlink name, one component below the
// directory dirfd ("" for the symlink behind dirfd itself).
func readlinkAt(dirfd int, name string) (string, error) {
	if name != "" {
		if errno := checkName(name); errno != 0 {
			return "", errno
		}
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// statGen stats name below dirfd ("" for dirfd itself) without following a
// link, and returns the inode's generation for go-fuse: its birth time.
// Node descriptors may be evicted (fdcache.go), and an inode whose last
// descriptor is closed and whose file is deleted may have its number
// reused; the birth time tells the new file from the old one.
func statGen(dirfd int, name string, st *syscall.Stat_t) (uint64, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_SYNC_AS_STAT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	} else if errno := checkName(name); errno != 0 {
		return 0, errno
	}
	var x unix.Statx_t
	for {
		err := unix.Statx(dirfd, name, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		break
	}
	*st = syscall.Stat_t{
		Dev: unix.Mkdev(x.Dev_major, x.Dev_minor), Ino: x.Ino, Nlink: uint64(x.Nlink),
		Mode: uint32(x.Mode), Uid: x.Uid, Gid: x.Gid,
		Rdev: unix.Mkdev(x.Rdev_major, x.Rdev_minor), Size: int64(x.Size),
		Blksize: int64(x.Blksize), Blocks: int64(x.Blocks),
		Atim: syscall.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim: syscall.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim: syscall.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	gen := uint64(1)
	if x.Mask&unix.STATX_BTIME != 0 {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec) + 1
	}
	return gen, nil
}
