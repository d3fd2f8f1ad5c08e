package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// Extended attributes act on the node's own inode through /proc/self/fd,
// which names exactly that inode. A symlink's own attributes are not
// served: Linux allows user attributes only on files and directories.

func (n *node) isSymlink() bool {
	return n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFLNK
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if n.isSymlink() {
		return 0, syscall.ENODATA
	}
	fd, done, errno := n.use()
	if errno != 0 {
		return 0, errno
	}
	defer done()
	sz, err := unix.Getxattr(procFdPath(fd), attr, dest)
	return uint32(sz), fusefs.ToErrno(err)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.changeXattr(func(path string) error { return unix.Setxattr(path, attr, data, int(flags)) })
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.changeXattr(func(path string) error { return unix.Removexattr(path, attr) })
}

// changeXattr runs change on the /proc/self/fd name of the node's inode,
// and tells the other mounts that the inode changed.
func (n *node) changeXattr(change func(path string) error) syscall.Errno {
	if n.root.readOnly {
		return syscall.EROFS
	}
	if n.isSymlink() {
		return syscall.EPERM
	}
	fd, done, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer done()
	defer n.root.changedInode(n)
	return fusefs.ToErrno(change(procFdPath(fd)))
}
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if n.isSymlink() {
		return 0, 0
	}
	fd, done, errno := n.use()
	if errno != 0 {
		return 0, errno
	}
	defer done()
	sz, err := unix.Listxattr(procFdPath(fd), dest)
	return uint32(sz), fusefs.ToErrno(err)
}
