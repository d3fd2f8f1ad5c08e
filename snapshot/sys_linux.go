package snapshot

import (
	"errors"

	"slices"

	"golang.org/x/sys/unix"
)

// This file holds the system calls the builder makes on the workspace.
// Each acts on a descriptor and, at most, one name below it: none walks a
// path, follows a symlink or crosses a mount, so nothing an agent puts in
// the workspace can lead the builder out of it.

// resolveFlags make openat2 refuse a symlink anywhere (ELOOP), a step out
// of the descriptor's folder, and a mount crossing (EXDEV).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openAt opens name, one name below the folder dirfd (or "." for dirfd
// itself), with flags plus O_NOFOLLOW and O_CLOEXEC.
func openAt(dirfd int, name string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: resolveFlags,
	}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		// EAGAIN: a rename or mount raced with the lookup.
		if err == unix.EINTR || err == unix.EAGAIN && tries < 16 {
			continue
		}
		return fd, err
	}
}

// lstatAt stats name, one name below the folder dirfd, without following
// a symlink in its place.
func lstatAt(dirfd int, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return err
		}
	}
}

// fstat stats the descriptor fd.
func fstat(fd int, st *unix.Stat_t) error {
	for {
		err := unix.Fstat(fd, st)
		if err != unix.EINTR {
			return err
		}
	}
}

// readlinkAt reads the target of the symlink name below the folder dirfd;
// EINVAL means name is not a symlink (any more).
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, maxLinkSize+1)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", err
		}
		if n > maxLinkSize {
			return "", unix.ENAMETOOLONG
		}
		return string(buf[:n]), nil
	}
}

// listDir returns the names in the folder fd (opened O_RDONLY), but "."
// and "..", sorted.
func listDir(fd int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	slices.Sort(names)
	return names, nil
}

// isErrno reports whether err is one of errs.
func isErrno(err error, errs ...unix.Errno) bool {
	var e unix.Errno
	return errors.As(err, &e) && slices.Contains(errs, e)
}
