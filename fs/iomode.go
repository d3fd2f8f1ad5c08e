package fs

import (
	"sync"
	"time"

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
// So the first open of an inode picks the mode, every open that overlaps
// it takes the same one, and an open after the last release picks again —
// with one exception. Switching between opens is enough for the kernel
// (it drops an open's hold on the inode's mode and backing file before it
// sends the RELEASE), but not for go-fuse (v2.12.1). go-fuse registers
// one backing id per node while its passthrough handles are open and
// counts them, but at every RELEASE of the node it drops a reference,
// also for a handle it served without passthrough, and it does that after
// our Release returned, on the RELEASE's own goroutine. A node going from
// cached to passthrough could thus see the late RELEASE of a cached handle
// take the reference of the new passthrough open: the id is unregistered
// while the kernel still uses it, and the node's next passthrough open,
// with a fresh id and backing file, fails with EIO. So a node goes from
// cached to passthrough only once its last cached handle was released a
// while ago (cachedReleaseGrace); until then an open that would pass
// through is served by the daemon instead, which is always safe. The other
// way, from passthrough to cached, is safe at once: a cached node takes
// no reference, and a late passthrough RELEASE drops only its own.
//
// An agent that reads a small file and writes it back at once thus writes
// it through the daemon (one WRITE per MiB, holding the path's lock);
// files it only writes, and big files, are passed through; small files
// it reads are served from the page cache.

// cachedReleaseGrace is how long after the release of its last cached
// handle a node keeps being served by the daemon. go-fuse's part of a
// RELEASE runs right after ours; the grace covers a goroutine that waits
// for a CPU a very long while.
const cachedReleaseGrace = time.Second

// passthroughMinSize is the size from which a read-only open is passed
// through too.
const passthroughMinSize = 1 << 20

// ioMode is the open-file state of one inode.
type ioMode struct {
	mu           sync.Mutex
	open         int       // open handles; guarded by mu
	passthrough  bool      // the mode of the open handles; guarded by mu
	cachedAs     fileKey   // the file as the last cached open saw it; guarded by mu
	cachedClosed time.Time // when the last cached handle was released; guarded by mu
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

	if writes {
		n.root.hub.writing.add(n.root, n.ino)
	}
	n.io.mu.Lock()
	if n.io.open == 0 {
		want := !n.root.noPassthrough && (writes || !stat() || st.Size >= passthroughMinSize)
		if want && !n.io.passthrough && time.Since(n.io.cachedClosed) < cachedReleaseGrace {
			want = false // see above: go-fuse may not be done with a cached release
		}
		n.io.passthrough = want
	}
	n.io.open++
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
		waits:        &n.root.hub.lockWaits,
	}
	h.released = func() {
		n.io.mu.Lock()
		n.io.open--
		if !passthrough {
			n.io.cachedClosed = time.Now()
		}
		n.io.mu.Unlock()
		if writes {
			n.root.hub.writing.done(n.root, n.ino)
			n.root.changedInode(n)
			// What was written through the handle, maybe after a
			// checkpoint read the file.
			n.root.trackInode(n)
		}
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
