package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// handle is an open file. Data I/O, locks, fsync and fallocate go straight
// to the backing descriptor (go-fuse's LoopbackFile does exactly that).
// Where the kernel offers FUSE passthrough, reads and writes never reach
// the daemon at all: the kernel does them on the backing file.
type handle struct {
	*fusefs.LoopbackFile
	fd int // the descriptor LoopbackFile wraps
	// closing, if set, runs just before the file is closed (the ledger
	// notes the end of a write).
	closing func(fd int)
	// lockPath, if set, takes the lock of the file's path for one write
	// the daemon serves (without passthrough, each WRITE comes here) and
	// returns its unlock.
	lockPath func() func()
	// released runs after the file is closed: it ends the open in the
	// inode's I/O mode and, for a handle that may have written, tells the
	// other mounts to drop what they cached.
	released func()
	// waits counts the handle's lock waits in progress (lockwait.go); nil
	// counts nowhere.
	waits *lockWaits
}

var (
	_ fusefs.FileReleaser = (*handle)(nil)
	_ fusefs.FileWriter   = (*handle)(nil)
	_ fusefs.FileSetlkwer = (*handle)(nil)
)

// Write writes to the backing file, holding the path's lock: no other
// modification of the path runs in the middle of it.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.lockPath != nil {
		defer h.lockPath()()
	}
	return h.LoopbackFile.Write(ctx, data, off)
}

// Release closes the backing descriptor.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.closing != nil {
		h.closing(h.fd)
	}
	errno := h.LoopbackFile.Release(ctx)
	if h.released != nil {
		h.released()
	}
	return errno
}

// plainHandle is a handle that go-fuse cannot pass through, because it
// lacks the PassthroughFd method.
type plainHandle struct {
	f *handle
}

var (
	_ fusefs.FileReader    = (*plainHandle)(nil)
	_ fusefs.FileWriter    = (*plainHandle)(nil)
	_ fusefs.FileReleaser  = (*plainHandle)(nil)
	_ fusefs.FileFlusher   = (*plainHandle)(nil)
	_ fusefs.FileFsyncer   = (*plainHandle)(nil)
	_ fusefs.FileGetattrer = (*plainHandle)(nil)
	_ fusefs.FileSetattrer = (*plainHandle)(nil)
	_ fusefs.FileAllocater = (*plainHandle)(nil)
	_ fusefs.FileLseeker   = (*plainHandle)(nil)
	_ fusefs.FileGetlker   = (*plainHandle)(nil)
	_ fusefs.FileSetlker   = (*plainHandle)(nil)
	_ fusefs.FileSetlkwer  = (*plainHandle)(nil)
)

func (h *plainHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.f.Read(ctx, dest, off)
}
func (h *plainHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.f.Write(ctx, data, off)
}
func (h *plainHandle) Release(ctx context.Context) syscall.Errno { return h.f.Release(ctx) }
func (h *plainHandle) Flush(ctx context.Context) syscall.Errno   { return h.f.Flush(ctx) }
func (h *plainHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.f.Fsync(ctx, flags)
}
func (h *plainHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.f.Getattr(ctx, out)
}
func (h *plainHandle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.f.Setattr(ctx, in, out)
}
func (h *plainHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return h.f.Allocate(ctx, off, size, mode)
}
func (h *plainHandle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.f.Lseek(ctx, off, whence)
}
func (h *plainHandle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.f.Getlk(ctx, owner, lk, flags, out)
}
func (h *plainHandle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.f.Setlk(ctx, owner, lk, flags)
}
func (h *plainHandle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.f.Setlkw(ctx, owner, lk, flags)
}

// Open opens the node's inode itself (through its O_PATH descriptor), so a
// name swapped for a link after the lookup changes nothing.
//
// An open that may write is a modification of the file's path: refused if
// the caller's read is stale, recorded otherwise (guard.go). An open for
// reading records the version read.
func (n *node) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	n.root.count()
	writes := opensForWriting(flags)
	if n.root.readOnly && writes {
		return nil, 0, syscall.EROFS
	}
	if n.isSymlink() {
		return nil, 0, syscall.ELOOP
	}
	name, dir := n.entryOf()
	if dir == nil {
		// The root, or a file without a name: no path to guard.
		fh, fopen, _, errno := n.open(flags, nil, 0)
		return fh, fopen, errno
	}
	dfd, ddone, errno := dir.use()
	if errno != 0 {
		return nil, 0, errno
	}
	defer ddone()
	a := n.root.actorOf(ctx)
	var (
		g      guarded
		unlock func()
		// An open for writing is a modification: it holds the change
		// gate (changes.go) with the path's lock, never across
		// syncKernel.
		leave = func() {}
	)
	for tries := 0; ; tries++ {
		if writes {
			leave = n.root.changes.enter()
		}
		g, unlock, errno = dir.take(dfd, name)
		if errno != 0 {
			leave()
			return nil, 0, errno
		}
		if g.state.fp.ino != n.ino && g.state.fp.ino != 0 {
			// The name holds another file now, put there behind our
			// back; the kernel, told ESTALE, looks the name up again and
			// retries.
			unlock()
			leave()
			return nil, 0, syscall.ESTALE
		}
		v := g.state.version
		if v <= n.synced.Load() || tries == maxSyncTries {
			break
		}
		// The kernel must drop what it caches of the file before this
		// open is answered, but never while the path is locked: a write
		// waiting for the lock may hold the very pages it would drop.
		unlock()
		leave()
		n.syncKernel(v)
	}
	// Runs last, once the path's lock and the change gate are let go.
	opened := false
	defer func() {
		if opened {
			n.root.dropOthersAttrs(n)
		}
	}()
	defer leave()
	defer unlock()
	if !writes {
		fh, fopen, _, errno := n.open(flags, nil, g.state.version)
		if errno == 0 {
			n.root.hub.ledger.read(a, g.key, g.state)
		}
		return fh, fopen, errno
	}
	if errno := n.root.refuseIfStale("open", dir.child(name), a, g); errno != 0 {
		return nil, 0, errno
	}
	w := n.root.newWriter(n, a, g)
	fh, fopen, fd, errno := n.open(flags, w, 0)
	if errno != 0 {
		n.root.hub.ledger.dropWriter(a, g.state)
		return nil, 0, errno
	}
	n.root.modified(a, g, fingerprintFd(fd))
	n.told(g.state.version) // it truncated, or will write, itself
	n.root.trackInode(n)
	if flags&syscall.O_TRUNC != 0 {
		n.root.changedAt(Changed, dir, name, a, g.state.version)
	}
	opened = true
	return fh, fopen, 0
}

// maxSyncTries bounds how often an open drops the kernel's caches of a
// file that keeps changing beside the mount meanwhile; after that it goes
// on with what it has.
const maxSyncTries = 3

// open opens the node's inode with flags and returns the handle, its FOPEN
// flags and its backing descriptor; w guards a handle that may write.
// version is the path's, for the page cache (iomode.go).
func (n *node) open(flags uint32, w *writer, version uint64) (fusefs.FileHandle, uint32, int, syscall.Errno) {
	pfd, done, errno := n.use()
	if errno != 0 {
		return nil, 0, -1, errno
	}
	defer done()
	fd, err := reopen(pfd, daemonFlags(flags))
	if err != nil {
		return nil, 0, -1, fusefs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 {
		n.root.changedInode(n)
	}
	fh, fopen := n.openHandle(fd, flags, w, version)
	return fh, fopen, fd, 0
}

// opensForWriting reports whether an open with flags may change the file.
func opensForWriting(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
}

// daemonFlags are the open flags for the daemon's own descriptor of a file
// opened with flags. The kernel sends every write with its offset, so
// O_APPEND would move the write; with passthrough the kernel opens its own
// backing file with the caller's flags, O_APPEND included.
func daemonFlags(flags uint32) int {
	return int(flags &^ (syscall.O_APPEND | fuse.FMODE_EXEC))
}
