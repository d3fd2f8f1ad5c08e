package fs

import (
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A file written through one mount while another mount of the same folder
// looks at it. Passthrough writes never reach the daemon, so no change can
// be pushed to the other mounts while the writer keeps the file open; and
// their kernels keep a file's attributes for the mount's attribute
// timeout. So:
//
//   - every open handle that may write is counted, by backing inode and
//     mount (openWriters);
//   - while a mount other than the asker's has one, the daemon's answers
//     about that inode (GETATTR, SETATTR, LOOKUP and the entries of a
//     listing) are valid for no time at all, so each stat reaches the
//     backing file. Zero it must be: the kernel rounds any other validity
//     up to a clock tick, a few milliseconds in which a stat would show a
//     size from before a write;
//   - an open for writing drops, before it returns, what the other mounts
//     cached of the inode's attributes (root.dropOthersAttrs). A reply of
//     theirs computed before the count moved is dropped by their kernel:
//     an invalidation raises the inode's attribute version, and the kernel
//     ignores a reply begun under an older one.
//
// The writer's own mount needs neither: its kernel made the writes and
// keeps the size they left.

// openWriters counts the open handles that may write, by backing inode
// and mount.
type openWriters struct {
	mu sync.Mutex
	by map[inodeKey]map[*root]int // guarded by mu
}

// inodeKey names a backing inode: the folder's device and the inode.
type inodeKey struct{ dev, ino uint64 }

// add counts one more handle of mount r that may write inode ino.
func (w *openWriters) add(r *root, ino uint64) {
	k := inodeKey{r.dev, ino}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = make(map[inodeKey]map[*root]int)
	}
	if w.by[k] == nil {
		w.by[k] = make(map[*root]int, 1)
	}
	w.by[k][r]++
}

// done undoes add at the handle's release.
func (w *openWriters) done(r *root, ino uint64) {
	k := inodeKey{r.dev, ino}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.by[k]
	if m[r] <= 1 {
		delete(m, r)
	} else {
		m[r]--
	}
	if len(m) == 0 {
		delete(w.by, k)
	}
}

// elsewhere reports whether a mount other than r has a handle open that
// may write inode ino.
func (w *openWriters) elsewhere(r *root, ino uint64) bool {
	k := inodeKey{r.dev, ino}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.by[k]
	return len(m) > 1 || len(m) == 1 && m[r] == 0
}

// attrValidity is how long the kernel may keep the attributes of n it is
// about to be told: not at all while another mount may be writing it.
func (n *node) attrValidity() time.Duration {
	if n.root.hub.writing.elsewhere(n.root, n.ino) {
		return 0
	}
	return n.root.attrTimeout
}

// setAttrValidity sets the validity of the attributes in out (attrValidity).
func (n *node) setAttrValidity(out *fuse.AttrOut) { out.SetTimeout(n.attrValidity()) }

// dropOthersAttrs drops what the other mounts of the folder cached of n's
// attributes (not its pages: an open there compares the file with what
// its pages hold, iomode.go). It waits for their kernels, so it is called
// by an open for writing after it let go of the path's lock and the
// change gate. A kernel that does not know the inode has nothing to drop.
func (r *root) dropOthersAttrs(n *node) {
	for _, o := range r.hub.mountsOf(r.dev) {
		if o == r {
			continue
		}
		if nd := o.known(n.ino); nd != nil {
			nd.NotifyContent(-1, 0) // a negative offset: attributes only
		}
	}
}
