package fs

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one inode of a workspace mount. It holds an O_PATH descriptor of
// the backing inode, opened when the kernel first looked the inode up. Every
// operation on the node works through that descriptor (or one component
// below it), so the daemon never resolves a backing path as a string.
//
// Its identity for go-fuse is the inode number with the inode's birth time
// as generation: an evicted descriptor no longer pins the inode, so its
// number may come back for another file.
type node struct {
	fusefs.Inode

	// root is shared by every node of the mount; immutable.
	root *root
	// fd is the O_PATH descriptor; set at creation, closed on forget.
	fd *pathFd
	// ino is the backing inode number, gen its generation (statGen);
	// immutable.
	ino, gen uint64
	// io is how the inode's open files are served (iomode.go).
	io ioMode
	// synced is a ledger time (ledger.now) at which this mount's kernel
	// was last told the inode's attributes: a change of its path with a
	// greater version was made beside this mount (through another mount,
	// the file API, or behind the filesystem's back), so the kernel's
	// cached size and pages may be stale (guard.go).
	synced atomic.Uint64
	// inKernel is set once NewInode made the node the kernel's: the
	// evictor (fdcache.go) reads its inode's fields only then, never while
	// NewInode is still writing them.
	inKernel atomic.Bool
}

// Compile-time checks: every operation the filesystem serves.
var (
	_ fusefs.InodeEmbedder      = (*node)(nil)
	_ fusefs.NodeOnForgetter    = (*node)(nil)
	_ fusefs.NodeStatfser       = (*node)(nil)
	_ fusefs.NodeLookuper       = (*node)(nil)
	_ fusefs.NodeGetattrer      = (*node)(nil)
	_ fusefs.NodeSetattrer      = (*node)(nil)
	_ fusefs.NodeOpener         = (*node)(nil)
	_ fusefs.NodeCreater        = (*node)(nil)
	_ fusefs.NodeTmpfiler       = (*node)(nil)
	_ fusefs.NodeMkdirer        = (*node)(nil)
	_ fusefs.NodeMknoder        = (*node)(nil)
	_ fusefs.NodeUnlinker       = (*node)(nil)
	_ fusefs.NodeRmdirer        = (*node)(nil)
	_ fusefs.NodeRenamer        = (*node)(nil)
	_ fusefs.NodeSymlinker      = (*node)(nil)
	_ fusefs.NodeReadlinker     = (*node)(nil)
	_ fusefs.NodeLinker         = (*node)(nil)
	_ fusefs.NodeOpendirHandler = (*node)(nil)
	_ fusefs.NodeReaddirer      = (*node)(nil)
	_ fusefs.NodeGetxattrer     = (*node)(nil)
	_ fusefs.NodeSetxattrer     = (*node)(nil)
	_ fusefs.NodeRemovexattrer  = (*node)(nil)
	_ fusefs.NodeListxattrer    = (*node)(nil)
)

// newNode wraps an O_PATH descriptor in a node; the node owns fd from now on.
func (r *root) newNode(fd int, ino, gen uint64) *node {
	n := &node{root: r, ino: ino, gen: gen}
	p := r.fds.newPathFd(fd, r.handleFd, r.id, n)
	n.fd = p
	runtime.AddCleanup(n, func(p *pathFd) { p.close() }, p)
	return n
}

// use gives the node's descriptor to one operation; call done when the
// operation no longer needs it.
func (n *node) use() (fd int, done func(), errno syscall.Errno) {
	fd, err := n.fd.acquire()
	if err != nil {
		return -1, nil, fusefs.ToErrno(err)
	}
	return fd, n.fd.release, 0
}

// OnForget closes the descriptor as soon as the kernel no longer needs the
// node, instead of waiting for the garbage collector.
func (n *node) OnForget() {
	if n.isTop() {
		// The root's descriptor is pinned until the root is released;
		// in a Pool, the kernel forgets a root once it was closed and
		// nothing uses it any more: it is released then.
		if s := n.root.slot; s != nil {
			s.forgotten()
		}
		return
	}
	n.root.forget(n)
	n.fd.close()
}

// rel returns the node's path inside the root, "/"-separated, for logs,
// refusals and link checks.
func (n *node) rel() string {
	return "/" + n.Path(n.root.top.EmbeddedInode())
}

// child returns the path of name below n, for logs.
func (n *node) child(name string) string {
	p := n.Path(n.root.top.EmbeddedInode())
	if p == "" {
		return "/" + name
	}
	return "/" + p + "/" + name
}

// addChild turns a freshly opened O_PATH descriptor for name into a child
// inode and fills out. On error the descriptor is closed.
func (n *node) addChild(ctx context.Context, fd int, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	now := n.root.hub.ledger.now()
	var st syscall.Stat_t
	gen, err := statGen(fd, "", &st)
	if err != nil {
		unix.Close(fd)
		return nil, fusefs.ToErrno(err)
	}
	if st.Dev != n.root.dev {
		unix.Close(fd)
		n.root.refuse("lookup", n.child(name), "", "crosses into another filesystem")
		return nil, syscall.EACCES
	}
	out.Attr.FromStat(&st)
	nd := n.root.newNode(fd, st.Ino, gen)
	out.SetAttrTimeout(nd.attrValidity())
	ch := n.NewInode(ctx, nd, n.root.stable(st.Mode, st.Ino, gen))
	if winner, ok := ch.Operations().(*node); ok {
		winner.inKernel.Store(true)
		if winner != nd {
			// The kernel knows this inode already: the new descriptor
			// is not needed (nor counted) a moment longer.
			nd.fd.close()
		}
		n.root.remember(winner)
		if winner == nd {
			// A new inode for the kernel too, which takes these
			// attributes as they are. (A known inode may drop the
			// attributes of a reply that raced with a change; only a
			// notification is sure to reach it.)
			nd.told(now)
		}
	}
	return ch, 0
}

// Lookup finds name in the directory without following a link in its place.
//
// The kernel looks a name up again whenever its entry timed out. If the
// name still holds the inode the kernel already knows, that node is
// returned as it is: one fstatat, and no new descriptor.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	n.root.count()
	if errno := checkName(name); errno != 0 {
		return nil, errno
	}
	dfd, done, errno := n.use()
	if errno != 0 {
		return nil, errno
	}
	defer done()
	if ch := n.GetChild(name); ch != nil {
		if known, ok := ch.Operations().(*node); ok {
			var st syscall.Stat_t
			if gen, err := statGen(dfd, name, &st); err == nil && st.Ino == known.ino && gen == known.gen && st.Dev == n.root.dev &&
				st.Mode&syscall.S_IFMT == ch.StableAttr().Mode&syscall.S_IFMT {
				out.Attr.FromStat(&st)
				out.SetAttrTimeout(known.attrValidity())
				return ch, 0
			}
		}
	}
	fd, err := openChild(dfd, name)
	if err == unix.EXDEV {
		n.root.refuse("lookup", n.child(name), "", "crosses into another filesystem")
		return nil, syscall.EACCES
	}
	if err != nil {
		return nil, fusefs.ToErrno(err)
	}
	return n.addChild(ctx, fd, name, out)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s unix.Statfs_t
	if err := unix.Fstatfs(n.root.fd, &s); err != nil {
		return fusefs.ToErrno(err)
	}
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize = uint32(s.Bsize), uint32(s.Frsize)
	out.NameLen = uint32(s.Namelen)
	return 0
}

func (n *node) Getattr(ctx context.Context, fh fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.root.count()
	defer n.setAttrValidity(out)
	if g, ok := fh.(fusefs.FileGetattrer); ok && fh != nil {
		return g.Getattr(ctx, out)
	}
	fd, done, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer done()
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return fusefs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = n.root.fuseIno(st.Ino)
	return 0
}

// told notes that the kernel has the inode's attributes and pages as they
// were at ledger time t (or later): it was notified, it made the change
// itself, or it learnt of a new inode.
func (n *node) told(t uint64) {
	for {
		cur := n.synced.Load()
		if cur >= t || n.synced.CompareAndSwap(cur, t) {
			return
		}
	}
}

// syncKernel makes sure this mount's kernel does not serve the file from
// attributes or pages older than version v of its path: if it was last
// told before v, its caches of the inode are dropped now, before the open
// that needs them is answered. Changes made through this mount keep the
// kernel told; only a change made beside it costs this notification.
//
// The notification waits for the kernel's page locks: never call it with
// a path locked (a WRITE holding a page may be waiting for that lock).
func (n *node) syncKernel(v uint64) {
	if v <= n.synced.Load() {
		return
	}
	now := n.root.hub.ledger.now()
	n.NotifyContent(0, 0)
	n.told(now)
}

// Setattr changes mode, owner, size or times. A change of size (truncate)
// is a modification of the file's path: refused if the caller's read is
// stale. The other changes leave the content, and so the version, alone.
func (n *node) Setattr(ctx context.Context, fh fusefs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.root.readOnly {
		return syscall.EROFS
	}
	defer n.root.changedInode(n)
	defer n.setAttrValidity(out)
	name, dir := n.entryOf()
	if dir == nil {
		// The root, or a file without a name: no path to guard.
		defer n.root.changes.enter()()
		errno := n.setattr(ctx, fh, in, out)
		if errno == 0 {
			n.root.trackInode(n)
		}
		return errno
	}
	dfd, a, g, release, errno := dir.takeEntry(ctx, name)
	if errno != 0 {
		return errno
	}
	defer release()
	_, resizes := in.GetSize()
	if resizes {
		if errno := n.root.refuseIfStale("truncate", dir.child(name), a, g); errno != 0 {
			return errno
		}
	}
	if errno := n.setattr(ctx, fh, in, out); errno != 0 {
		return errno
	}
	n.root.trackInode(n)
	fp, err := fingerprintAt(dfd, name)
	if err != nil {
		return 0
	}
	if resizes {
		n.root.modified(a, g, fp)
		n.told(g.state.version)
	} else {
		n.root.hub.ledger.touched(g.state, fp)
	}
	// Not the SETATTR that changes nothing (killpriv.go).
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_SIZE|fuse.FATTR_MTIME) != 0 {
		n.root.changedAt(Changed, dir, name, a, g.state.version)
	}
	return 0
}

func (n *node) setattr(ctx context.Context, fh fusefs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	s, byHandle := fh.(fusefs.FileSetattrer)
	if byHandle && fh != nil {
		if errno := s.Setattr(ctx, in, out); errno != 0 || !killsSetID(in) {
			return errno
		}
	}
	fd, done, errno := n.use()
	if errno != 0 {
		return errno
	}
	defer done()
	if byHandle && fh != nil {
		// Only the set-id bits are left to clear.
		return n.killSetID(fd, out)
	}
	if mode, ok := in.GetMode(); ok {
		if err := fchmod(fd, mode&07777); err != nil {
			return fusefs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := fchown(fd, u, g); err != nil {
			return fusefs.ToErrno(err)
		}
	}
	if size, ok := in.GetSize(); ok {
		if err := unix.Truncate(procFdPath(fd), int64(size)); err != nil {
			return fusefs.ToErrno(err)
		}
	}
	if killsSetID(in) {
		if errno := n.killSetID(fd, out); errno != 0 {
			return errno
		}
	}
	if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME) != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if in.Valid&fuse.FATTR_ATIME != 0 {
			ts[0] = timespec(in.Valid&fuse.FATTR_ATIME_NOW != 0, in.Atime, in.Atimensec)
		}
		if in.Valid&fuse.FATTR_MTIME != 0 {
			ts[1] = timespec(in.Valid&fuse.FATTR_MTIME_NOW != 0, in.Mtime, in.Mtimensec)
		}
		if err := futimes(fd, ts); err != nil {
			return fusefs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return fusefs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = n.root.fuseIno(st.Ino)
	return 0
}

// killsSetID reports whether the kernel asks, with this SETATTR, that the
// file's set-id bits be cleared, as it leaves that to the server under
// HANDLE_KILLPRIV_V2 (killpriv.go): a truncate or chown with
// FATTR_KILL_SUIDGID, or a SETATTR that changes nothing at all, which is
// what the kernel sends before a write by a caller without CAP_FSETID
// (the kernel's remove-privileges step, its kill flags dropped on the
// way) and for chown(-1, -1), which clears them on a local filesystem
// too. A SETATTR that sets the mode says itself which bits it wants.
func killsSetID(in *fuse.SetAttrIn) bool {
	const changes = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_SIZE |
		fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW | fuse.FATTR_CTIME
	if in.Valid&fuse.FATTR_MODE != 0 {
		return false
	}
	return in.Valid&fuse.FATTR_KILL_SUIDGID != 0 || in.Valid&changes == 0
}

// killSetID clears the set-id bits of the regular file fd the way a local
// filesystem does on a write by a caller without CAP_FSETID (dropSetID),
// and fills out with the attributes it then has.
func (n *node) killSetID(fd int, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return fusefs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		if mode := dropSetID(st.Mode & 07777); mode != st.Mode&07777 {
			if err := fchmod(fd, mode); err != nil {
				return fusefs.ToErrno(err)
			}
			if err := fstat(fd, &st); err != nil {
				return fusefs.ToErrno(err)
			}
		}
	}
	out.FromStat(&st)
	out.Ino = n.root.fuseIno(st.Ino)
	return 0
}

func timespec(now bool, sec uint64, nsec uint32) unix.Timespec {
	if now {
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.Timespec{Sec: int64(sec), Nsec: int64(nsec)}
}

// keepMode tells ownByCaller to leave the mode alone (a symlink's, or an
// entry made without one).
const keepMode = ^uint32(0)

// ownByCaller makes a new entry what its creator asked for: the daemon
// creates everything as root, with its own umask taken off the mode a
// second time (the kernel already took the caller's off), so the entry is
// given to the caller and, unless perm is keepMode, gets exactly the
// permission bits perm. With allow_other and default_permissions the
// kernel then checks every caller against these.
//
// As on a local filesystem, an entry made in a set-gid directory keeps the
// directory's group (the backing filesystem gave it), and a directory made
// there stays set-gid. The owner is changed before the mode: a chown drops
// the set-id bits of a file.
//
// dfd is the parent directory's descriptor, fd the new entry's. A failure
// is logged and leaves the entry narrower than asked, never wider: a file
// is made without set-id bits (withoutSetID) and with the daemon's umask,
// and gets its mode only once it belongs to its caller, so a failed chown
// never leaves a set-uid file of root's.
func (n *node) ownByCaller(ctx context.Context, dfd, fd int, perm uint32) {
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		n.root.log.Warn("cannot stat a new entry", "err", err)
		return
	}
	uid, gid := -1, -1
	if caller, ok := fuse.FromContext(ctx); ok {
		if caller.Uid != st.Uid {
			uid = int(caller.Uid)
		}
		if caller.Gid != st.Gid && !setgidDir(dfd) {
			gid = int(caller.Gid)
		}
	}
	isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
	cur := st.Mode & 07777
	if uid != -1 || gid != -1 {
		if err := fchown(fd, uid, gid); err != nil {
			n.root.log.Warn("cannot give a new entry to its creator", "uid", uid, "gid", gid, "err", err)
			return
		}
		if !isDir {
			cur = dropSetID(cur)
		}
	}
	if perm == keepMode || st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return
	}
	want := perm & 07777
	if isDir {
		want |= st.Mode & syscall.S_ISGID
	}
	if cur == want {
		return
	}
	if err := fchmod(fd, want); err != nil {
		n.root.log.Warn("cannot give a new entry its mode", "mode", fmt.Sprintf("%04o", want), "err", err)
	}
}

// setgidDir reports whether the directory dfd is set-gid: its new entries
// take its group.
func setgidDir(dfd int) bool {
	var st syscall.Stat_t
	return fstat(dfd, &st) == nil && st.Mode&syscall.S_ISGID != 0
}

// withoutSetID is the mode a file is made with before it belongs to its
// caller (ownByCaller adds the set-id bits after the chown).
func withoutSetID(mode uint32) uint32 {
	return mode &^ (syscall.S_ISUID | syscall.S_ISGID)
}

// dropSetID returns mode without the bits a write or a chown by anyone
// without CAP_FSETID drops from a file: set-uid, and set-gid where the
// group may execute (set-gid alone marks mandatory locking and stays).
func dropSetID(mode uint32) uint32 {
	mode &^= syscall.S_ISUID
	if mode&syscall.S_IXGRP != 0 {
		mode &^= syscall.S_ISGID
	}
	return mode
}
