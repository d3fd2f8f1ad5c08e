package fs

import (
	"sync"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// How an open file is served. Passthrough lets the kernel read and write
// the backing file itself, which is what a big sequential write or read
// wants; but it costs two more system calls at every open and close (the
// backing file is registered with the kernel and dropped again), and it
// keeps no page cache of its own. A small file opened only to be read —
// grep, a compiler reading sources — is better served the classic way:
// the daemon reads it once and the kernel keeps its pages for every later
// open (FOPEN_KEEP_CACHE), with no READ at all.
//
// The kernel allows one mode per inode at a time: an inode with a
// passthrough open refuses a cached open, and the other way round, with
// EIO. So the first open of an inode picks the mode and every open that
// overlaps it takes the same one.

// passthroughMinSize is the size from which a read-only open is passed
// through too.
const passthroughMinSize = 1 << 20

// ioMode is the open-file state of one inode.
type ioMode struct {
	mu          sync.Mutex
	open        int     // open handles; guarded by mu
	passthrough bool    // the mode of the open handles; guarded by mu
	cachedAs    fileKey // the file as the last cached open saw it; guarded by mu
}

// fileKey tells whether a file changed: any write, through any mount or
// behind the filesystem's back, moves its size, mtime or ctime, and the
// ledger's version of its path. The version is what makes it exact: two
// writes of the same size can share a ctime on a filesystem with coarse
// timestamps, but never a version.
type fileKey struct {
	size         int64
	mtime, ctime unix.Timespec
	version      uint64
}

// openHandle wraps fd, just opened with flags for n, in a file handle and
// returns it with its FOPEN flags. w, if set, is the writer's guard: its
// path's lock for each write and its release hook. version is the
// ledger's version of the file's path as the open found it (0 if it has
// no path).
//
// No open needs a FLUSH at close: writes reach the backing file when they
// are made (passthrough, or a synchronous WRITE; there is no writeback
// cache to push out), and POSIX locks are released by their own unlock
// request. That saves a round trip on every close.
func (n *node) openHandle(fd int, flags uint32, w *writer, version uint64) (fusefs.FileHandle, uint32) {
	writes := opensForWriting(flags)
	// The file is stat'ed only when the answer depends on it: a write
	// passed through needs neither its size nor its times.
	var st unix.Stat_t
	statted, statOK := false, false
	stat := func() bool {
		if !statted {
			statted, statOK = true, unix.Fstat(fd, &st) == nil
		}
		return statOK
	}

	n.io.mu.Lock()
	if n.io.open == 0 {
		n.io.passthrough = !n.root.noPassthrough && (writes || !stat() || st.Size >= passthroughMinSize)
	}
	n.io.open++
	passthrough := n.io.passthrough
	fopen := uint32(fuse.FOPEN_NOFLUSH)
	if !passthrough && stat() {
		// Keep the pages the kernel has only if the file is as the last
		// cached open left it; a passthrough write, or one made behind
		// our back, went around those pages.
		key := fileKey{size: st.Size, mtime: st.Mtim, ctime: st.Ctim, version: version}
		if key == n.io.cachedAs {
			fopen |= fuse.FOPEN_KEEP_CACHE
		}
		n.io.cachedAs = key
	}
	n.io.mu.Unlock()

	h := &handle{
		LoopbackFile: fusefs.NewLoopbackFile(fd).(*fusefs.LoopbackFile),
		fd:           fd,
		released: func() {
			n.io.mu.Lock()
			n.io.open--
			n.io.mu.Unlock()
			if writes {
				n.root.changedInode(n)
			}
		},
	}
	if w != nil {
		h.closing, h.lockPath = w.closing, w.lockPath
	}
	if !passthrough {
		// Without PassthroughFd, go-fuse serves the handle itself.
		return &plainHandle{h}, fopen
	}
	return h, fopen
}
