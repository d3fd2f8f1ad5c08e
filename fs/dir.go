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
	return n.makeEntryMode(ctx, name, out, unix.AT_REMOVEDIR, mode, func(dfd int) error {
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
	return n.makeEntryMode(ctx, name, out, 0, mode, func(dfd int) error {
		return unix.Mknodat(dfd, name, withoutSetID(mode), int(rdev))
	})
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	n.root.count()
	if errno := n.mayModify(name); errno != 0 {
		return nil, nil, 0, errno
	}
	// Runs last, once the path's lock is let go: another mount may know
	// the file (CREATE found it there) or look it up before this returns.
	var writing *node
	defer func() {
		if writing != nil {
			n.root.dropOthersAttrs(writing)
		}
	}()
	dfd, a, g, release, errno := n.takeEntry(ctx, name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer release()
	// A name the actor read and someone else removed or replaced since.
	if errno := n.root.refuseIfStale("create", n.child(name), a, g); errno != 0 {
		return nil, nil, 0, errno
	}
	ofd, made, err := createAt(dfd, name, flags, mode)
	if err != nil {
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	if !made {
		if errno := mayOpenFound(ctx, ofd, flags); errno != 0 {
			unix.Close(ofd)
			return nil, nil, 0, errno
		}
	}
	// The node's own descriptor: the same one-component, no-follow open
	// as a lookup (cheaper than reopening through /proc). Should the name
	// be swapped in between, the node is whatever now holds the name,
	// opened without following it, and judged as such.
	pfd, err := openChild(dfd, name)
	if err != nil {
		unix.Close(ofd)
		if made {
			unix.Unlinkat(dfd, name, 0)
		}
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	if made {
		n.ownByCaller(ctx, dfd, pfd, mode)
	}
	n.root.changedEntry(n, name)
	n.root.track(n, name, false)
	ch, errno := n.addChild(ctx, pfd, name, out)
	if errno != 0 {
		unix.Close(ofd)
		return nil, nil, 0, errno
	}
	n.root.modified(a, g, fingerprintFd(ofd))
	kind := Changed
	if made {
		kind = Created
	}
	n.root.changedAt(kind, n, name, a, g.state.version)
	nd := ch.Operations().(*node)
	nd.told(g.state.version)
	var w *writer
	if opensForWriting(flags) {
		w = n.root.newWriter(nd, a, g)
	}
	fh, fopen := nd.openHandle(ofd, flags, w, 0)
	if w != nil {
		writing = nd
	}
	return ch, fh, fopen, 0
}

// mayOpenFound checks the caller's permission to open, with flags, a file
// that a CREATE found already there. The kernel sent CREATE believing the
// name missing (a stale negative entry: the file was made beside this
// mount), so it checked only the directory; the daemon, root, opened the
// file anyway. Fail closed: only the caller's own uid and primary gid are
// known here (FUSE sends no supplementary groups).
func mayOpenFound(ctx context.Context, fd int, flags uint32) syscall.Errno {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return syscall.EACCES
	}
	if caller.Uid == 0 {
		return 0
	}
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return fusefs.ToErrno(err)
	}
	perm := st.Mode & 07
	switch {
	case st.Uid == caller.Uid:
		perm = st.Mode >> 6 & 07
	case st.Gid == caller.Gid:
		perm = st.Mode >> 3 & 07
	}
	var want uint32
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		want |= 04
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		want |= 02
	}
	if want&^perm != 0 {
		return syscall.EACCES
	}
	return 0
}

// createAt opens name in the directory dfd for Create, making it if it is
// missing, and reports whether it made it: only a file made here is given
// to its caller and its mode (the kernel sends CREATE for a name it
// believes missing, which another mount or the backing folder may have
// made meanwhile; that file keeps its owner and mode). O_NOFOLLOW: a link
// planted under this name is never written through.
func createAt(dfd int, name string, flags, mode uint32) (fd int, made bool, err error) {
	open := daemonFlags(flags) | unix.O_NOFOLLOW | unix.O_CLOEXEC
	for range 8 {
		fd, err = unix.Openat(dfd, name, open|unix.O_CREAT|unix.O_EXCL, withoutSetID(mode))
		if err != unix.EEXIST || flags&unix.O_EXCL != 0 {
			return fd, err == nil, err
		}
		fd, err = unix.Openat(dfd, name, open&^(unix.O_CREAT|unix.O_EXCL), 0)
		if err != unix.ENOENT {
			return fd, false, err
		}
		// Removed in between: make it again.
	}
	return -1, false, unix.EEXIST
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
	// The mode is the caller's; reopen would make the file with none.
	ofd, err := unix.Openat(dfd, ".", daemonFlags(flags)&^(unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NOCTTY)|unix.O_TMPFILE|unix.O_CLOEXEC, withoutSetID(mode))
	if err != nil {
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	pfd, err := unix.Open(procFdPath(ofd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(ofd)
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	n.ownByCaller(ctx, dfd, pfd, mode)
	var st syscall.Stat_t
	gen, err := statGen(pfd, "", &st)
	if err != nil {
		unix.Close(pfd)
		unix.Close(ofd)
		return nil, nil, 0, fusefs.ToErrno(err)
	}
	out.Attr.FromStat(&st)
	nd := n.root.newNode(pfd, st.Ino, gen)
	out.SetAttrTimeout(nd.attrValidity())
	ch := n.NewInode(ctx, nd, n.root.stable(st.Mode, st.Ino, gen))
	if winner, ok := ch.Operations().(*node); ok {
		winner.inKernel.Store(true)
	}
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
	n.root.track(n, name, false)
	n.root.changedAt(Removed, n, name, a, g.state.version)
	return 0
}

// Rename moves an entry. A symlink moved to another directory means
// something else there (its target is relative to where it sits), so it,
// or every symlink in a moved folder's tree, is checked against the
// boundary from its new place before it moves (checkMove, link.go).
// RENAME_WHITEOUT is refused as Mknod refuses devices: it leaves a 0:0
// character device.
func (n *node) Rename(ctx context.Context, name string, newParent fusefs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&unix.RENAME_WHITEOUT != 0 {
		n.root.refuse("rename", n.child(name), "", "whiteouts (device nodes) are not allowed in a workspace")
		return syscall.EPERM
	}
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
		if errno := n.checkMove(name, np, newName, flags); errno != 0 {
			return errno
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
	defer n.root.changes.enter()()
	fromState, toState, unlock := l.lock(from, to)
	defer unlock()
	src, dst := guarded{key: from, state: fromState}, guarded{key: to, state: toState}
	if _, err := l.refresh(src, ofd, name); err != nil {
		return fusefs.ToErrno(err)
	}
	if _, err := l.refresh(dst, nfd, newName); err != nil {
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
	// A folder moved, or swapped in, brings its whole tree.
	n.root.track(n, name, srcFp.dir)
	n.root.track(np, newName, dstFp.dir)
	if flags&unix.RENAME_EXCHANGE != 0 {
		n.root.changedAt(Changed, n, name, a, src.state.version)
		n.root.changedAt(Changed, np, newName, a, dst.state.version)
	} else {
		n.root.renamedAt(n, name, np, newName, a, dst.state.version)
	}
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
	n.root.count()
	dfd, done, errno := n.use()
	if errno != 0 {
		return nil, errno
	}
	defer done()
	fd, err := reopen(dfd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fusefs.ToErrno(err)
	}
	ds, errno := fusefs.NewLoopbackDirStreamFd(fd)
	if _, ok := ds.(loopbackStream); errno != 0 || n.root.inoBase == 0 || !ok {
		return ds, errno
	}
	return &movedInos{DirStream: ds, r: n.root}, 0
}

// movedInos gives a listing's entries the inode numbers the kernel knows
// their inodes by (root.fuseIno), as stat shows them. It passes on every
// operation of go-fuse's loopback stream, which is what it wraps.
type movedInos struct {
	fusefs.DirStream
	r *root
}

type loopbackStream interface {
	fusefs.DirStream
	fusefs.FileReaddirenter
	fusefs.FileReleasedirer
	fusefs.FileSeekdirer
	fusefs.FileFsyncdirer
}

var (
	_ fusefs.FileReaddirenter = (*movedInos)(nil)
	_ fusefs.FileReleasedirer = (*movedInos)(nil)
	_ fusefs.FileSeekdirer    = (*movedInos)(nil)
	_ fusefs.FileFsyncdirer   = (*movedInos)(nil)
)

func (d *movedInos) Next() (fuse.DirEntry, syscall.Errno) {
	e, errno := d.DirStream.Next()
	if errno == 0 {
		e.Ino = d.r.fuseIno(e.Ino)
	}
	return e, errno
}

func (d *movedInos) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	e, errno := d.DirStream.(loopbackStream).Readdirent(ctx)
	if errno == 0 && e != nil {
		moved := *e
		moved.Ino = d.r.fuseIno(e.Ino)
		return &moved, 0
	}
	return e, errno
}

func (d *movedInos) Releasedir(ctx context.Context, flags uint32) {
	d.DirStream.(loopbackStream).Releasedir(ctx, flags)
}

func (d *movedInos) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.DirStream.(loopbackStream).Seekdir(ctx, off)
}

func (d *movedInos) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.DirStream.(loopbackStream).Fsyncdir(ctx, flags)
}

// mayModify is the common gate of every operation that changes an entry.
func (n *node) mayModify(name string) syscall.Errno {
	if n.root.readOnly {
		return syscall.EROFS
	}
	return checkName(name)
}

// makeEntry makes the entry name in this directory with mk, opens it as a
// lookup would, and returns it as a child. If the open fails, the entry is
// removed again (unlinkat with rmFlags). own gives the new entry to the
// caller; a hard link keeps its file's owner.
func (n *node) makeEntry(ctx context.Context, name string, out *fuse.EntryOut, rmFlags int, own bool, mk func(dfd int) error) (*fusefs.Inode, syscall.Errno) {
	return n.makeEntryAs(ctx, name, out, rmFlags, own, keepMode, mk)
}

// makeEntryMode is makeEntry for an entry its caller owns and whose
// permission bits are exactly mode's (Mkdir, Mknod).
func (n *node) makeEntryMode(ctx context.Context, name string, out *fuse.EntryOut, rmFlags int, mode uint32, mk func(dfd int) error) (*fusefs.Inode, syscall.Errno) {
	return n.makeEntryAs(ctx, name, out, rmFlags, true, mode, mk)
}

func (n *node) makeEntryAs(ctx context.Context, name string, out *fuse.EntryOut, rmFlags int, own bool, mode uint32, mk func(dfd int) error) (*fusefs.Inode, syscall.Errno) {
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
		n.ownByCaller(ctx, dfd, fd, mode)
	}
	fp := fingerprintFd(fd)
	n.root.modified(a, g, fp)
	n.root.changedEntry(n, name)
	n.root.track(n, name, fp.dir)
	n.root.changedAt(Created, n, name, a, g.state.version)
	return n.addChild(ctx, fd, name, out)
}
