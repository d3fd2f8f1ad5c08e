package fs

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Hub joins the mounts that one gateway serves. Two mounts may serve one
// backing folder (a thread's mount and an inspection mount of it); each
// kernel mount caches names and attributes for a while, so a change made
// through one mount must be pushed to the others, or they would show a
// stale tree until their caches expire.
//
// Mounts register with the hub at Serve and leave it once they stopped
// serving (after Close). Every
// change a mount makes is queued and delivered by one goroutine as FUSE
// notifications to the other mounts of the same filesystem that know the
// changed inode. Delivery is asynchronous on purpose: a notification waits
// for locks in the receiving kernel mount, which must never wait for the
// request that caused it.
//
// A zero Hub is not usable; call NewHub, and Close when finished.
type Hub struct {
	log     hclog.Logger
	queue   chan notice
	done    chan struct{}
	stop    chan struct{} // closed by Close: ends the sweeper and the evictor
	swept   chan struct{} // closed when the sweeper ended
	evicted chan struct{} // closed when the node evictor ended
	ended   chan struct{} // closed when the first Close is done: nothing of the hub runs
	onSweep func()        // if set, runs on the sweeper before each sweep (tests); set before start
	fds     *fdCache      // the node descriptors of every mount of the hub
	ledger  *ledger       // versions, locks and read records (ledger.go)
	actors  *actors       // who makes a request (actors.go)
	temps   tempFiles     // the file API's temporary files (atomic_linux.go)
	// copyBufs are the restores' copy buffers (Restorer.WriteFile): a
	// restore of thousands of small files would otherwise allocate, and
	// clear, one of restoreCopyBuf bytes per file.
	copyBufs  sync.Pool
	observe   OpObserver  // HubConfig.ObserveOp; nil tells no one
	writing   openWriters // open handles that may write, by inode and mount (writers.go)
	lockWaits lockWaits   // lock waits in progress on every mount of the hub (lockwait.go)

	// sendMu is held shared by a sender that waits for room in the
	// queue (postWait), exclusive by Close to close the queue.
	sendMu sync.RWMutex

	mu     sync.Mutex
	mounts map[*root]struct{} // guarded by mu
	closed bool               // guarded by mu
	// changes holds the change log of each workspace folder that a mount
	// or a Files uses (changes.go); guarded by mu.
	changes map[rootID]*changeLog
}

// LockWaits returns how many lock requests (F_SETLKW, flock) wait for a
// lock on the hub's mounts now.
func (h *Hub) LockWaits() int { return int(h.lockWaits.n.Load()) }

// notice is one change: the entry name in directory ino changed, or (name
// == "") the attributes and content of inode ino changed. A notice with a
// barrier is no change: delivery closes it once every notice queued
// before it is delivered (flush).
type notice struct {
	from    *root
	dev     uint64
	ino     uint64
	name    string
	barrier chan struct{}
}

// hubQueue bounds the changes waiting for delivery. A full queue drops the
// notice (the receiving mount's cache then expires by its timeouts) rather
// than stalling the request that made the change.
const hubQueue = 4096

// HubConfig configures a hub. The zero value is ready to use.
type HubConfig struct {
	// Logger receives structured logs; nil means no logs.
	Logger hclog.Logger
	// MaxReads bounds the read records kept; 0 means DefaultMaxReads.
	MaxReads int
	// NoEditChecks switches the refusal of stale modifications off
	// (versions and records are still kept). It exists to show, in tests
	// and benchmarks, what the checks do and cost; never in production.
	NoEditChecks bool
	// MaxNodes bounds the nodes (inodes the kernels know) of all the
	// hub's mounts together: past it, the least recently used are
	// dropped from the kernels' caches (fdcache.go). 0 means
	// DefaultMaxNodes; a negative value means no bound.
	MaxNodes int
	// ObserveOp, if set, is told of each request the hub's mounts answer
	// (observe.go).
	ObserveOp OpObserver
}

// DefaultMaxNodes is the default bound of HubConfig.MaxNodes. A node costs
// about 830 bytes of live heap, 1.2 KB of resident memory; with this bound
// the nodes of a hub stay at about 110 MiB of heap, some 220 MB resident,
// however many files are walked (BenchmarkNodeMemory, docs/operations.md).
const DefaultMaxNodes = 100_000

// sweepEvery is how often the records of actors that are gone are
// dropped.
const sweepEvery = 10 * time.Second

// NewHub starts a hub. Call Close when finished.
//
// The hub also holds the budget of node descriptors for all its mounts,
// read from the process's open-file limit when the hub is made (see
// fdBudget: half of it, and at least 512 descriptors left below it), and
// the cap of files the mounts' users may hold open (fileCap: half of what
// is left), so that the rest is always the daemon's own.
func NewHub(cfg HubConfig) *Hub {
	limit := uint64(1024)
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		limit = lim.Cur
	}
	return newHub(cfg, fdBudget(limit), fileCap(limit))
}

// newHub starts a hub with a node descriptor budget and a cap of open
// files (0: none).
func newHub(cfg HubConfig, budget, maxFiles int) *Hub {
	h := makeHub(cfg, budget, maxFiles)
	h.start()
	return h
}

// makeHub makes a hub that runs nothing yet: start starts it.
func makeHub(cfg HubConfig, budget, maxFiles int) *Hub {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	maxNodes := cfg.MaxNodes
	switch {
	case maxNodes == 0:
		maxNodes = DefaultMaxNodes
	case maxNodes < 0:
		maxNodes = 0
	}
	h := &Hub{
		fds:     newFDCache(budget, maxNodes, maxFiles),
		ledger:  newLedger(cfg.MaxReads, cfg.NoEditChecks),
		observe: cfg.ObserveOp,
		actors:  newActors(),
		log:     logger,
		queue:   make(chan notice, hubQueue),
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
		swept:   make(chan struct{}),
		evicted: make(chan struct{}),
		ended:   make(chan struct{}),
		mounts:  make(map[*root]struct{}),
		changes: make(map[rootID]*changeLog),
	}
	return h
}

// start starts the hub's three goroutines. The hub owns them: Close stops
// them and waits for them.
func (h *Hub) start() {
	go h.deliver()
	go h.sweeper()
	go func() {
		defer close(h.evicted)
		h.fds.evictNodes(h.stop)
	}()
}

// sweeper drops, now and then, the read records of actors that are gone
// and the registrations of processes that ended.
func (h *Hub) sweeper() {
	defer close(h.swept)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			if h.onSweep != nil {
				h.onSweep()
			}
			h.Sweep()
		}
	}
}

// Sweep drops at once what the sweeper drops every few seconds: the read
// records of processes that ended, and registrations of ended processes.
func (h *Hub) Sweep() {
	h.actors.sweep()
	if n := h.ledger.forgetActors(h.actors.gone); n > 0 {
		h.log.Debug("dropped the read records of ended processes", "records", n)
	}
}

// Close stops delivery, the sweeper and the node evictor, waits for the
// three goroutines to end and drops what the hub caches of callers. Every
// call returns only once all that is done: a second or concurrent Close
// waits for the first.
func (h *Hub) Close() {
	h.mu.Lock()
	first := !h.closed
	if first {
		h.closed = true
		close(h.stop)
	}
	h.mu.Unlock()
	if !first {
		<-h.ended
		return
	}
	// A sender waiting for room (postWait) gets it: delivery runs until
	// the queue closes.
	h.sendMu.Lock()
	close(h.queue)
	h.sendMu.Unlock()
	<-h.done
	<-h.swept
	<-h.evicted
	h.actors.close()
	close(h.ended)
}

func (h *Hub) add(r *root) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mounts[r] = struct{}{}
}

// mountsOf returns the mounts of the folder on dev.
func (h *Hub) mountsOf(dev uint64) []*root {
	h.mu.Lock()
	defer h.mu.Unlock()
	var rs []*root
	for r := range h.mounts {
		if r.dev == dev {
			rs = append(rs, r)
		}
	}
	return rs
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
	// A change made through a mount needs telling only to the others; one
	// made beside the mounts (from == nil: the file API) to all of them.
	if h.closed || len(h.mounts) == 0 || n.from != nil && len(h.mounts) < 2 {
		return
	}
	select {
	case h.queue <- n:
	default:
		h.log.Debug("change notice dropped: queue full")
	}
}

// postWait queues notices made beside the mounts, waiting for room in the
// queue rather than dropping one. Never call it holding a path lock or
// from a FUSE request: delivery waits for the kernel, which may wait for
// them.
func (h *Hub) postWait(ns ...notice) {
	h.sendMu.RLock()
	defer h.sendMu.RUnlock()
	for _, n := range ns {
		h.mu.Lock()
		skip := h.closed || len(h.mounts) == 0
		h.mu.Unlock()
		if skip {
			return
		}
		h.queue <- n
	}
}

// flush returns once every notice queued before it is delivered (or the
// hub closed). The same rules as postWait's hold.
func (h *Hub) flush() {
	b := make(chan struct{})
	h.postWait(notice{barrier: b})
	h.mu.Lock()
	skip := h.closed || len(h.mounts) == 0
	h.mu.Unlock()
	if skip {
		return
	}
	select {
	case <-b:
	case <-h.done:
	}
}

// changed tells the mounts of the folder on dev that the file ino, the
// entry name in the directory dir, was changed beside them.
func (h *Hub) changed(dev, ino, dir uint64, name string) {
	h.post(notice{dev: dev, ino: dir, name: name})
	h.post(notice{dev: dev, ino: ino})
}

func (h *Hub) deliver() {
	defer close(h.done)
	for n := range h.queue {
		if n.barrier != nil {
			close(n.barrier)
			continue
		}
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
