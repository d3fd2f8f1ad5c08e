package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Directory operations. Each acts on the directory's own O_PATH descriptor
// and one name below it; a new entry is opened (O_PATH, no follow) right
// after it is made, and undone if that fails, so a half-made entry is never
// left behind.

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if errno := n.mayModify(name); errno != 0 {
		return nil, errno
	}
	return n.makeEntry(ctx, name, out, unix.AT_REMOVEDIR, true, func(dfd int) error {
		return unix.Mkdirat(dfd, name, mode)
	})
}

// Mknod makes FIFOs, sockets and empty regular files. Device nodes are
// refused: a workspace has no business holding a door to a device.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if errno := n.mayModify(name); errno != 0 {
		return nil, errno
	}
	switch mode & syscall.S_IFMT {
	case syscall.S_IFCHR, syscall.S_IFBLK:
		n.root.refuse("mknod", n.child(name), "", "device nodes are not allowed in a workspace")
		return nil, syscall.EPERM
	}
	return n.makeEntry(ctx, name, out, 0, true, func(dfd int) error {
		return unix.Mknodat(dfd, name, mode, int(rdev))
	})
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	if errno := n.mayModify(name); errno != 0 {
		return nil, nil, 0, errno
	}
	dfd, a, g, release, errno := n.takeEntry(ctx, name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer release()
	// A name the actor read and someone else removed or replaced since.
	if errno := n.root.refuseIfStale("create", n.child(name), a, g); errno != 0 {
		return nil, nil, 0, errno
	}
	// O_NOFOLLOW: a link planted under this name is never written through.
	ofd, err := unix.Openat(dfd, name, daemonFlags(flags)|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	// The node's own descriptor: the same one-component, no-follow open
	// as a lookup (cheaper than reopening through /proc). Should the name
	// be swapped in between, the node is whatever now holds the name,
	// opened without following it, and judged as such.
	pfd, err := openChild(dfd, name)
	if err != nil {
		unix.Close(ofd)
		if flags&unix.O_EXCL != 0 {
			unix.Unlinkat(dfd, name, 0)
		}
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	n.ownByCaller(ctx, pfd)
	n.root.changedEntry(n, name)
	ch, errno := n.addChild(ctx, pfd, name, out)
	if errno != 0 {
		unix.Close(ofd)
		return nil, nil, 0, errno
	}
	n.root.modified(a, g, fingerprintFd(ofd))
	made := ch.Operations().(*node)
	made.told(g.state.version)
	var w *writer
	if opensForWriting(flags) {
		w = n.root.newWriter(made, a, g)
	}
	fh, fopen := made.openHandle(ofd, flags, w, 0)
	return ch, fh, fopen, 0
}

// Tmpfile serves O_TMPFILE: an unnamed file in this directory.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	if n.root.readOnly {
		return nil, nil, 0, syscall.EROFS
	}
	dfd, done, errno := n.use()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer done()
	ofd, err := reopen(dfd, daemonFlags(flags)|unix.O_TMPFILE)
	if err != nil {
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	pfd, err := unix.Open(procFdPath(ofd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(ofd)
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	n.ownByCaller(ctx, pfd)
	var st syscall.Stat_t
	gen, err := statGen(pfd, "", &st)
	if err != nil {
		unix.Close(pfd)
		unix.Close(ofd)
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	nd := n.root.newNode(pfd, st.Ino, gen)
	ch := n.NewInode(ctx, nd, fusefs.StableAttr{Mode: st.Mode, Ino: st.Ino, Gen: gen})
	fh, fopen := nd.openHandle(ofd, flags, nil, 0)
	return ch, fh, fopen, 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, "unlink", name, 0)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(ctx, "rmdir", name, unix.AT_REMOVEDIR)
}

// remove unlinks the entry name (flags as for unlinkat). Removing a file
// read before its last change would throw that change away: refused.
func (n *node) remove(ctx context.Context, op, name string, flags int) syscall.Errno {
	if errno := n.mayModify(name); errno != 0 {
		return errno
	}
	dfd, a, g, release, errno := n.takeEntry(ctx, name)
	if errno != 0 {
		return errno
	}
	defer release()
	if errno := n.root.refuseIfStale(op, n.child(name), a, g); errno != 0 {
		return errno
	}
	if err := unix.Unlinkat(dfd, name, flags); err != nil {
		return fusefs.ToErrno(err)
	}
	n.root.modified(a, g, fingerprint{})
	n.root.changedEntry(n, name)
	return 0
}

// Rename moves an entry. A symlink moved to another directory means
// something else there (its target is relative to where it sits), so it is
// checked against the boundary again before it moves.
func (n *node) Rename(ctx context.Context, name string, newParent fusefs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.root != n.root {
		return syscall.EXDEV
	}
	if errno := n.mayModify(name); errno != 0 {
		return errno
	}
	if errno := np.mayModify(newName); errno != 0 {
		return errno
	}
	if np != n {
		if errno := n.checkMovedLink(name, np, "rename"); errno != 0 {
			return errno
		}
		if flags&unix.RENAME_EXCHANGE != 0 {
			if errno := np.checkMovedLink(newName, n, "rename"); errno != 0 {
				return errno
			}
		}
	}
	ofd, odone, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer odone()
	nfd, ndone, errno := np.use()
	if errno != 0 {
		return errno
	}
	defer ndone()

	// Both names are locked, in the ledger's one order. Renaming over a
	// file read before its last change would throw that change away
	// (the editor's pattern: write a copy, rename it over the original);
	// with RENAME_EXCHANGE, both names are written over.
	a := n.root.actorOf(ctx)
	l := n.root.hub.ledger
	from, to := n.key(name), np.key(newName)
	fromState, toState, unlock := l.lock(from, to)
	defer unlock()
	src, dst := guarded{from, fromState}, guarded{to, toState}
	if err := l.refresh(src, ofd, name); err != nil {
		return fusefs.ToErrno(err)
	}
	if err := l.refresh(dst, nfd, newName); err != nil {
		return fusefs.ToErrno(err)
	}
	if errno := n.root.refuseIfStale("rename", np.child(newName), a, dst); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if errno := n.root.refuseIfStale("rename", n.child(name), a, src); errno != 0 {
			return errno
		}
	}
	if err := unix.Renameat2(ofd, name, nfd, newName, uint(flags)); err != nil {
		return fusefs.ToErrno(err)
	}
	srcFp, _ := fingerprintAt(ofd, name)
	dstFp, _ := fingerprintAt(nfd, newName)
	n.root.modified(a, src, srcFp)
	if from != to {
		n.root.modified(a, dst, dstFp)
	}
	n.root.changedEntry(n, name)
	n.root.changedEntry(np, newName)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	ds, errno := n.Readdir(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return ds, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_CACHE_DIR, 0
}

func (n *node) Readdir(ctx context.Context) (fusefs.DirStream, syscall.Errno) {
	dfd, done, errno := n.use()
	if errno != 0 {
		return nil, errno
	}
	defer done()
	fd, err := reopen(dfd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fusefs.ToErrno(err)
	}
	return fusefs.NewLoopbackDirStreamFd(fd)
}

// mayModify is the common gate of every operation that changes an entry.
func (n *node) mayModify(name string) syscall.Errno {
	if n.root.readOnly {
		return syscall.EROFS
	}
	if !validName(name) {
		return syscall.EINVAL
	}
	return 0
}

// makeEntry makes the entry name in this directory with mk, opens it as a
// lookup would, and returns it as a child. If the open fails, the entry is
// removed again (unlinkat with rmFlags). own gives the new entry to the
// caller; a hard link keeps its file's owner.
func (n *node) makeEntry(ctx context.Context, name string, out *fuse.EntryOut, rmFlags int, own bool, mk func(dfd int) error) (*fusefs.Inode, syscall.Errno) {
	dfd, a, g, release, errno := n.takeEntry(ctx, name)
	if errno != 0 {
		return nil, errno
	}
	defer release()
	if err := mk(dfd); err != nil {
		return nil, fusefs.ToErrno(err)
	}
	fd, err := openChild(dfd, name)
	if err != nil {
		unix.Unlinkat(dfd, name, rmFlags)
		return nil, fusefs.ToErrno(err)
	}
	if own {
		n.ownByCaller(ctx, fd)
	}
	n.root.modified(a, g, fingerprintFd(fd))
	n.root.changedEntry(n, name)
	return n.addChild(ctx, fd, name, out)
}
