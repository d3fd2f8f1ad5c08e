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
// passthrough open refuses a cached open, and the other way round, and a
// passthrough open must name the backing file the inode's other
// passthrough opens use; it refuses any of that with EIO.
//
// So a node's mode is chosen once, at its first open, and kept for as
// long as the node lives: every later open of it, overlapping or not,
// takes the same mode. Switching between opens would be enough for the
// kernel — it drops an open's hold on the inode's mode and backing file
// before it sends the RELEASE — but not for go-fuse (v2.12.1). go-fuse
// registers one backing id per node while its passthrough handles are
// open and counts them, but at every RELEASE of the node it drops a
// reference, also for a handle it served without passthrough. And it
// does that after our Release returned, on the RELEASE's own goroutine,
// while other requests run. A node that went from cached to passthrough
// could thus see the late RELEASE of a cached handle take the reference
// of a passthrough open: the id is unregistered while the kernel still
// uses it, and the next passthrough open of the node, with a fresh id
// and backing file, fails with EIO (EBUSY in the kernel), or fails
// outright if its reply named the id just unregistered (ENOENT). A node
// served one way only never mixes the two: a cached node never has a
// backing id, and a passthrough node's references are exact.
//
// The price: a small file first opened to be read stays cached, and
// writes to it are served by the daemon (each WRITE one round trip,
// holding its path's lock) instead of passed through; a file first
// opened to write, created, or big at its first open is passed through
// for good, reads included. A file replaced by a new one (an editor's
// rename) is a new node and chooses again.

// passthroughMinSize is the size from which a read-only open is passed
// through too.
const passthroughMinSize = 1 << 20

// ioMode is the open-file state of one inode.
type ioMode struct {
	mu          sync.Mutex
	chosen      bool    // the first open chose the mode; guarded by mu
	passthrough bool    // the mode of every open of the node; guarded by mu
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
	if !n.io.chosen {
		// For good: see above why the mode never changes.
		n.io.chosen = true
		n.io.passthrough = !n.root.noPassthrough && (writes || !stat() || st.Size >= passthroughMinSize)
	}
	passthrough := n.io.passthrough
	fopen := uint32(fuse.FOPEN_NOFLUSH)
	if !passthrough && stat() {
		// Keep the pages the kernel has only if the file is as the last
		// cached open left it; a write made beside this mount (through
		// another mount, the file API, or behind our back) went around
		// those pages.
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
	}
	if writes {
		h.released = func() { n.root.changedInode(n) }
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
