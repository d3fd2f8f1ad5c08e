package fs

import (
	"container/list"
	"sync"
	"syscall"
	"time"
	"weak"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// A node keeps an O_PATH descriptor of its backing inode, so that every
// operation acts on that very inode and never resolves a path. The kernel
// may know far more inodes than a process may hold descriptors (a big
// node_modules has hundreds of thousands; a container may cap a process at
// twenty thousand), so the descriptors are a cache with a budget shared by
// every mount of the hub: the least recently used idle ones are closed, and
// reopened on demand with open_by_handle_at, which names the same inode
// exactly (a handle is not a path: no link is followed, no name can be
// swapped in). A handle of an inode that is gone opens as ESTALE.
//
// The budget is a hard bound on the descriptors that no operation is using:
// a descriptor is idle, and so can be closed, from the moment it is opened
// (lookup, create, mkdir, mknod, symlink, link, tmpfile) until an operation
// acquires it, and again after the operation released it; every new or
// reopened descriptor trims the cache back to its budget. Only descriptors
// that operations hold at that very moment may go beyond it, and those are
// bounded by the requests served at once, not by the inodes the kernel
// knows.
//
// The nodes themselves cost memory (go-fuse's inode, this package's node
// and its bookkeeping, for every inode the kernel knows), and the kernel
// keeps an inode as long as its dentry is cached: without memory pressure,
// forever. So the cache also bounds the nodes (maxNodes): past the bound,
// the least recently used are dropped from the kernel's dentry cache
// (FUSE_NOTIFY_PRUNE, or FUSE_NOTIFY_INVAL_ENTRY on their parent), and the
// kernel, which keeps no FUSE inode that nothing refers to, forgets them
// (FORGET, node.OnForget). A node the kernel still uses (an open file, a
// working folder) stays until it is let go.

// fdCache bounds the open node descriptors, and the nodes, of a hub.
type fdCache struct {
	budget   int // immutable
	maxNodes int // immutable; 0: unbounded

	mu    sync.Mutex
	idle  list.List // *pathFd with an open descriptor and no user, most recent first; guarded by mu
	open  int       // open descriptors counted against budget; guarded by mu
	nodes list.List // *pathFd of every node not yet forgotten, most recently used first; guarded by mu

	maxFiles  int            // immutable; 0: unbounded
	files     int            // files open for the mounts' users (handles); guarded by mu
	filesOf   map[uint64]int // files by mount (root.id); guarded by mu
	refusedAt time.Time      // when an open was last refused and logged; guarded by mu

	wake chan struct{} // tells the node evictor the nodes passed maxNodes; buffered, 1

	noPrune bool // tests: forget nodes as on a kernel without FUSE_NOTIFY_PRUNE
}

func newFDCache(budget, maxNodes, maxFiles int) *fdCache {
	return &fdCache{budget: budget, maxNodes: maxNodes, maxFiles: maxFiles, filesOf: make(map[uint64]int), wake: make(chan struct{}, 1)}
}

// Descriptor budget. The daemon needs descriptors of its own at any time:
// the API socket and its connections, pipes and pidfds for every exec and
// job, the store's files, /dev/fuse for each new mount, the files agents
// have open through the mounts. The node descriptors leave it half of the
// open-file limit, and never less than fdReserveMin.
const (
	fdReserveMin = 512
	fdBudgetMin  = 64 // below this a walk thrashes; only for tiny limits
)

// fdBudget returns the node descriptor budget for an open-file limit.
func fdBudget(limit uint64) int {
	reserve := max(limit/2, fdReserveMin)
	if limit < reserve+fdBudgetMin {
		return fdBudgetMin
	}
	return int(min(limit-reserve, 1<<30))
}

// fileCap returns how many files the mounts' users may hold open at once,
// each of which the daemon holds open too: half of the reserve, so that
// a job opening files by the thousand cannot take the other half, the
// daemon's own (its sockets, exec pipes, the store, new mounts).
func fileCap(limit uint64) int {
	budget := uint64(fdBudget(limit))
	if limit <= budget {
		return 1
	}
	return int(min((limit-budget)/2, 1<<30))
}

// refuseLogEvery bounds the log lines of refused opens: an agent may try
// without end.
const refuseLogEvery = time.Minute

// takeFile counts one more open file of mount against maxFiles; false
// when there are as many as there may be. log tells whether to log the
// refusal.
func (c *fdCache) takeFile(mount uint64) (ok, log bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxFiles > 0 && c.files >= c.maxFiles {
		now := time.Now()
		if now.Sub(c.refusedAt) >= refuseLogEvery {
			c.refusedAt = now
			return false, true
		}
		return false, false
	}
	c.files++
	c.filesOf[mount]++
	return true, false
}

// closeFile gives back a file of mount counted by takeFile.
func (c *fdCache) closeFile(mount uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.filesOf[mount] == 0 {
		return // settled when its mount stopped
	}
	c.files--
	if c.filesOf[mount]--; c.filesOf[mount] == 0 {
		delete(c.filesOf, mount)
	}
}

// openFilesCapped serves OPEN, CREATE and TMPFILE only while the files
// the mounts' users hold open are fewer than the hub's cap: the daemon
// holds each such file open too, until its RELEASE. Past the cap they fail
// with ENFILE ("too many open files in system"), so that the rest of the
// reserve stays the daemon's own. It wraps go-fuse's raw filesystem: the
// one place every file handle the kernel gets passes, and gives back.
type openFilesCapped struct {
	fuse.RawFileSystem
	fds *fdCache
	id  uint64 // the server's key in fds.filesOf (serverAcct.id)
	log hclog.Logger
}

// take counts a file about to be opened; ENFILE past the cap.
func (o *openFilesCapped) take() fuse.Status {
	ok, log := o.fds.takeFile(o.id)
	if ok {
		return fuse.OK
	}
	if log {
		o.log.Warn("refused to open a file: the mounts' users hold as many open files as the daemon allows (logged once a minute)", "max", o.fds.maxFiles)
	}
	return fuse.Status(syscall.ENFILE)
}

// counted runs open, one of OPEN, CREATE and TMPFILE, if take allows it,
// and gives the file back if open fails.
func (o *openFilesCapped) counted(open func() fuse.Status) fuse.Status {
	if st := o.take(); !st.Ok() {
		return st
	}
	st := open()
	if !st.Ok() {
		o.fds.closeFile(o.id)
	}
	return st
}

func (o *openFilesCapped) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return o.counted(func() fuse.Status { return o.RawFileSystem.Open(cancel, in, out) })
}

func (o *openFilesCapped) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return o.counted(func() fuse.Status { return o.RawFileSystem.Create(cancel, in, name, out) })
}

func (o *openFilesCapped) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return o.counted(func() fuse.Status { return o.RawFileSystem.Tmpfile(cancel, in, out) })
}

func (o *openFilesCapped) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	o.RawFileSystem.Release(cancel, in)
	o.fds.closeFile(o.id)
}

// pathFd is the descriptor of one node, open or closed.
//
// Lock order: pathFd.mu before fdCache.mu.
type pathFd struct {
	cache   *fdCache // nil: pinned, never evicted (the root)
	mountFd int      // any descriptor on the backing filesystem, for open_by_handle_at
	mount   uint64   // root.id of the mount the node belongs to; immutable
	// node is the node that owns this descriptor, for the node evictor:
	// weak, so that the descriptor (which the node's cleanup holds) does
	// not keep its node alive.
	node weak.Pointer[node]

	mu      sync.Mutex
	fd      int              // -1 while closed; guarded by mu
	users   int              // operations using fd now; guarded by mu
	handle  *unix.FileHandle // taken before the first eviction; guarded by mu
	noEvict bool             // no handle could be had: keep fd open; guarded by mu
	gone    bool             // closed for good; guarded by mu
	elem    *list.Element    // place in cache.idle; guarded by cache.mu
	lru     *list.Element    // place in cache.nodes; guarded by cache.mu
}

// newPathFd takes over fd, the new descriptor of node n of mount. It is
// idle until an operation acquires it, and may be evicted at once.
func (c *fdCache) newPathFd(fd, mountFd int, mount uint64, n *node) *pathFd {
	p := &pathFd{cache: c, mountFd: mountFd, mount: mount, node: weak.Make(n), fd: fd}
	c.mu.Lock()
	c.open++
	p.elem = c.idle.PushFront(p)
	p.lru = c.nodes.PushFront(p)
	over := c.maxNodes > 0 && c.nodes.Len() > c.maxNodes
	c.mu.Unlock()
	if over {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.trim()
	return p
}

// acquire returns the open descriptor, reopening it by handle if it was
// evicted. Every successful acquire must be followed by release.
func (p *pathFd) acquire() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return -1, unix.ESTALE
	}
	if p.fd < 0 {
		fd, err := unix.OpenByHandleAt(p.mountFd, *p.handle, unix.O_PATH|unix.O_CLOEXEC)
		if err != nil {
			return -1, err
		}
		p.fd = fd
		if p.cache != nil {
			p.cache.mu.Lock()
			p.cache.open++
			p.cache.mu.Unlock()
		}
	}
	p.users++
	if p.users == 1 && p.cache != nil {
		p.cache.mu.Lock()
		if p.elem != nil {
			p.cache.idle.Remove(p.elem)
			p.elem = nil
		}
		if p.lru != nil {
			p.cache.nodes.MoveToFront(p.lru)
		}
		p.cache.mu.Unlock()
	}
	return p.fd, nil
}

// release ends a use begun by acquire, and trims the cache to its budget.
func (p *pathFd) release() {
	p.mu.Lock()
	p.users--
	if p.gone && p.users == 0 && p.fd >= 0 {
		// Forgotten while in use: close now that the last use ended.
		unix.Close(p.fd)
		p.fd = -1
	}
	idle := p.users == 0 && !p.gone && p.cache != nil
	if idle && !p.noEvict {
		p.cache.mu.Lock()
		p.elem = p.cache.idle.PushFront(p)
		p.cache.mu.Unlock()
	}
	p.mu.Unlock()
	if idle {
		p.cache.trim()
	}
}

// get returns the descriptor of a pinned pathFd (the root), which is never
// evicted.
func (p *pathFd) get() int { return p.fd }

// close closes the descriptor for good (the kernel forgot the node, or its
// mount stopped serving).
func (p *pathFd) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	p.gone = true
	if p.cache != nil {
		p.cache.mu.Lock()
		if p.elem != nil {
			p.cache.idle.Remove(p.elem)
			p.elem = nil
		}
		if p.lru != nil {
			p.cache.nodes.Remove(p.lru)
			p.lru = nil
		}
		if p.fd >= 0 {
			p.cache.open--
		}
		p.cache.mu.Unlock()
	}
	if p.fd >= 0 && p.users == 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// trim closes idle descriptors, least recently used first, until the cache
// is within its budget.
func (c *fdCache) trim() {
	for {
		c.mu.Lock()
		if c.open <= c.budget {
			c.mu.Unlock()
			return
		}
		// The victim is locked while it is still on the list, so that no
		// release can slip in between and leave it open but off the list.
		// TryLock: the order is pathFd.mu before fdCache.mu; one that is
		// busy right now is skipped and stays on the list.
		var victim *pathFd
		for e := c.idle.Back(); e != nil; e = e.Prev() {
			if p := e.Value.(*pathFd); p.mu.TryLock() {
				victim = p
				break
			}
		}
		if victim == nil {
			c.mu.Unlock()
			return // all in use: the last release trims again
		}
		c.idle.Remove(victim.elem)
		victim.elem = nil
		c.mu.Unlock()
		victim.evictLocked()
	}
}

// evictLocked closes p's descriptor if nobody uses it, taking its handle
// first, and unlocks p.
func (p *pathFd) evictLocked() {
	defer p.mu.Unlock()
	if p.users > 0 || p.fd < 0 || p.gone || p.noEvict {
		return
	}
	if p.handle == nil {
		h, _, err := unix.NameToHandleAt(p.fd, "", unix.AT_EMPTY_PATH)
		if err != nil {
			// The backing filesystem gives no handles: this one stays
			// open and is no longer offered for eviction; the node
			// evictor still bounds how many such nodes there are.
			p.noEvict = true
			return
		}
		p.handle = &h
	}
	unix.Close(p.fd)
	p.fd = -1
	p.cache.mu.Lock()
	p.cache.open--
	p.cache.mu.Unlock()
}

// closeMount closes, for good, the descriptors of every node of the mount:
// once its server stopped, the kernel forgets none of them any more, and
// the nodes may stay reachable for long (the Mount holds its server), so
// a deleted file's descriptor would hold its disk space until a restart.
// The mount's open files still counted (a connection aborted before their
// RELEASE) are given back too.
func (c *fdCache) closeMount(mount uint64) {
	c.mu.Lock()
	c.files -= c.filesOf[mount]
	delete(c.filesOf, mount)
	var ps []*pathFd
	for e := c.nodes.Front(); e != nil; e = e.Next() {
		if p := e.Value.(*pathFd); p.mount == mount {
			ps = append(ps, p)
		}
	}
	c.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
}

// counts returns the open descriptors and the nodes not yet forgotten.
func (c *fdCache) counts() (open, nodes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.nodes.Len()
}

// evictNodes runs until stop is closed: whenever the nodes pass maxNodes,
// it asks the kernels to forget the least recently used ones, down to
// seven eighths of the bound (so that it runs once per many new nodes, not
// for each). It holds no lock while it notifies: a notification may wait
// for a directory's lock in the kernel, which a request being served may
// hold.
func (c *fdCache) evictNodes(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-c.wake:
		}
		byMount := make(map[*root][]*fusefs.Inode)
		for _, n := range c.leastUsed() {
			byMount[n.root] = append(byMount[n.root], n.EmbeddedInode())
		}
		for _, ns := range byMount {
			c.forget(ns)
		}
	}
}

// pruneBatch is how many nodes one prune notification names.
const pruneBatch = 512

// forget asks the kernel of one mount to forget the nodes ns. It drops
// their dentries that nobody uses: FUSE_NOTIFY_PRUNE (protocol 7.45) names
// the inodes, and drops every name of each; older kernels get
// FUSE_NOTIFY_INVAL_ENTRY for one name of each, on its parent.
func (c *fdCache) forget(ns []*fusefs.Inode) {
	for len(ns) > 0 && !c.noPrune {
		batch := ns[:min(len(ns), pruneBatch)]
		if errno := batch[0].NotifyPrune(batch); errno == syscall.ENOSYS {
			break
		}
		ns = ns[len(batch):]
	}
	for _, n := range ns {
		name, parent := n.Parent()
		if parent == nil {
			continue // the root, or unlinked: forgotten when let go
		}
		// An error means the kernel has no such entry (any more), or
		// the mount stopped serving, which closes its nodes anyway.
		_ = parent.NotifyEntry(name)
	}
}

// leastUsed returns the nodes to forget to get down to seven eighths of
// maxNodes, least recently used first. Each goes to the front of the
// list: one the kernel keeps (in use) is not asked again before all
// others were.
func (c *fdCache) leastUsed() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	excess := c.nodes.Len() - (c.maxNodes - c.maxNodes/8)
	var ns []*node
	for range c.nodes.Len() {
		if len(ns) >= excess {
			break
		}
		e := c.nodes.Back()
		c.nodes.MoveToFront(e)
		// A node NewInode has not made the kernel's yet is not one the
		// kernel could forget.
		if n := e.Value.(*pathFd).node.Value(); n != nil && n.inKernel.Load() {
			ns = append(ns, n)
		}
	}
	return ns
}

// DescriptorStats are the figures of a hub's descriptor cache, for
// metrics.
type DescriptorStats struct {
	Open   int // node descriptors open now
	Budget int // how many it may hold open
	Nodes  int // nodes the kernels know
	Files  int // files open for the mounts' users
}

// Descriptors returns the hub's descriptor figures now.
func (h *Hub) Descriptors() DescriptorStats {
	c := h.fds
	c.mu.Lock()
	defer c.mu.Unlock()
	return DescriptorStats{Open: c.open, Budget: c.budget, Nodes: c.nodes.Len(), Files: c.files}
}
