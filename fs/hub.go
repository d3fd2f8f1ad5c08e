package fs

import (
	"sync"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Hub joins the mounts that one gateway serves. Two mounts may serve one
// backing folder (a thread's mount and an inspection mount of it); each
// kernel mount caches names and attributes for a while, so a change made
// through one mount must be pushed to the others, or they would show a
// stale tree until their caches expire.
//
// Mounts register with the hub at Serve and leave it at Close. Every
// change a mount makes is queued and delivered by one goroutine as FUSE
// notifications to the other mounts of the same filesystem that know the
// changed inode. Delivery is asynchronous on purpose: a notification waits
// for locks in the receiving kernel mount, which must never wait for the
// request that caused it.
//
// A zero Hub is not usable; call NewHub, and Close when finished.
type Hub struct {
	log   hclog.Logger
	queue chan notice
	done  chan struct{}
	fds   *fdCache // the node descriptors of every mount of the hub

	mu     sync.Mutex
	mounts map[*root]struct{} // guarded by mu
	closed bool               // guarded by mu
}

// notice is one change: the entry name in directory ino changed, or (name
// == "") the attributes and content of inode ino changed.
type notice struct {
	from *root
	dev  uint64
	ino  uint64
	name string
}

// hubQueue bounds the changes waiting for delivery. A full queue drops the
// notice (the receiving mount's cache then expires by its timeouts) rather
// than stalling the request that made the change.
const hubQueue = 4096

// NewHub starts a hub. Call Close when finished.
//
// The hub also holds the budget of node descriptors for all its mounts:
// half of the process's open-file limit (read when the hub is made; raise
// the limit first, see RaiseFileLimit), leaving the rest to open files,
// sockets and the store.
func NewHub(logger hclog.Logger) *Hub {
	budget := 1024
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur/2 > uint64(budget) {
		budget = int(min(lim.Cur/2, 1<<30))
	}
	return newHub(logger, budget)
}

// newHub starts a hub with a descriptor budget.
func newHub(logger hclog.Logger, fdBudget int) *Hub {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	h := &Hub{
		fds:    newFDCache(fdBudget),
		log:    logger,
		queue:  make(chan notice, hubQueue),
		done:   make(chan struct{}),
		mounts: make(map[*root]struct{}),
	}
	go h.deliver()
	return h
}

// Close stops delivery and waits for the delivering goroutine.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		<-h.done
		return
	}
	h.closed = true
	close(h.queue)
	h.mu.Unlock()
	<-h.done
}

func (h *Hub) add(r *root) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mounts[r] = struct{}{}
}

func (h *Hub) remove(r *root) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mounts, r)
}

// post queues a notice; it never blocks.
func (h *Hub) post(n notice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.mounts) < 2 {
		return
	}
	select {
	case h.queue <- n:
	default:
		h.log.Debug("change notice dropped: queue full")
	}
}

func (h *Hub) deliver() {
	defer close(h.done)
	for n := range h.queue {
		h.mu.Lock()
		var targets []*root
		for r := range h.mounts {
			if r != n.from && r.dev == n.dev {
				targets = append(targets, r)
			}
		}
		h.mu.Unlock()
		for _, r := range targets {
			nd := r.known(n.ino)
			if nd == nil {
				continue
			}
			if n.name != "" {
				nd.NotifyEntry(n.name)
			}
			// Attributes, and cached content (a directory's cached
			// listing, a file's pages).
			nd.NotifyContent(0, 0)
		}
	}
}
