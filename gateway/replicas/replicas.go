package replicas

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/keyed"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// The retries of a failed upload: the pause doubles from retryMin up to
// retryMax, each drawn in [d/2, d) so that servers that lost the store
// together do not come back to it together.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

// Config is what the room needs of the daemon. Every field is required
// but CacheBytes, the pending changes' and the collection's, which have
// defaults.
type Config struct {
	// URL names the store (replica.NewS3's form).
	URL string
	// CacheDir is the folder of the heads of the packs sent for tenant's
	// checkpoints (replica.UploadOptions.Cache).
	CacheDir func(tenant string) string
	Store    meta.Store
	Repos    Repos
	HostID   string
	Logger   hclog.Logger
	// Served lists the threads this host serves, and Pending reads what
	// changed in a workspace folder since its last checkpoint
	// (fs.Hub.PendingChanges): both go to the store every PendingEvery
	// (0: DefaultPendingEvery), for a move's note (pending.go).
	Served       func() []Served
	Pending      func(root string, since uint64) (fs.ChangeSet, uint64, bool)
	PendingEvery time.Duration

	// CollectEvery is the time between collections of the store, across
	// the servers that share it (0: an hour); Grace is theirs
	// (replica.SweepOptions.Grace; 0: a day), which also bounds this
	// server's uploads (see uploadBounds). CollectHook, if not nil, is
	// told of each collection this server ran, with its error; for tests.
	CollectEvery, Grace time.Duration
	CollectHook         func(replica.SweepStats, error)
	// CacheBytes bounds the backlog's bytes (Admit); 0 is no bound.
	CacheBytes int64
}

// Repos is what the room calls of the checkpoints.
type Repos interface {
	// Repo is tenant's snapshot repository.
	Repo(tenant string) (*snapshot.Repo, error)
	// LockTurn takes k's checkpoint lock: the history is marked under it,
	// so that a checkpoint's own write of the history never meets a
	// conflict made by this room.
	LockTurn(ctx context.Context, k meta.ThreadKey) (unlock func(), err error)
}

// job is a checkpoint to upload: its tree, and its parent's ("" none).
type job struct {
	k          meta.ThreadKey
	id         string
	tree, base string
	bytes      int64 // what it counts in the backlog (ownBytes)
}

// ownBytes is what checkpoint c counts in the backlog: what it counts in
// its thread's snapshot quota (checkpoints.SnapshotBytes), its own bytes,
// the bytes of its tree its base does not hold; its whole tree's apparent
// size for a record from before the quotas. It is not what the upload
// sends (the store may hold some of it, from another thread, and packs
// are compressed) but it is recorded, so that the backlog costs nothing
// to count, and it is the measure the operator already bounds the
// checkpoints' disk by.
func ownBytes(c meta.Checkpoint) int64 {
	if c.Counted {
		return c.OwnBytes
	}
	return c.Bytes
}

func (j job) key() string { return j.k.Tenant + "\x00" + j.k.Thread + "\x00" + j.id }

// Replicas is the room. Start opens the store, Run starts the uploader;
// call Close when the daemon stops.
type Replicas struct {
	cfg   Config // never changed
	log   hclog.Logger
	store replica.Store // never changed

	ctx    context.Context // ends with Close; never changed
	cancel context.CancelFunc
	wake   chan struct{} // a job was queued (capacity 1)
	done   chan struct{} // closed when the uploader returned (Run)
	// reported is closed when the reporter of pending changes returned
	// (Run).
	reported chan struct{}

	fetches keyed.Locks[string] // one fetch per tenant and tree (Fetch)

	collectNow chan struct{} // a collection is asked for (capacity 1; Dropped)
	collected  chan struct{} // closed when the collector returned (Run)
	// swept and sweepsFailed count this server's collections of the
	// store, freed the bytes they deleted (Collections).
	swept, sweepsFailed, freed atomic.Int64

	mu      sync.Mutex
	running bool            // Run started the uploader
	queue   []job           // in order; queue[0] is being uploaded
	queued  map[string]bool // the keys of queue's jobs
	bytes   int64           // the sum of queue's jobs' bytes
	// pushes counts the jobs ever queued; counted is what it was when
	// the last recount began: a refusal recounts only when jobs were
	// queued since (Admit), since a checkpoint drops others only when
	// one is recorded (a deleted thread's: the uploader's recount).
	pushes, counted uint64
	up              bool  // the last request to the store answered
	lastErr         error // why the last upload failed, while !up
}

// Start opens the store: a server out of reach, a missing bucket or
// refused credentials are an error here, so that a daemon told to
// replicate does not start without a store to replicate to.
func Start(ctx context.Context, cfg Config) (*Replicas, error) {
	s, err := replica.NewS3(ctx, cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot store: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	return &Replicas{
		cfg: cfg, log: cfg.Logger, store: s, ctx: rctx, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}), reported: make(chan struct{}),
		collectNow: make(chan struct{}, 1), collected: make(chan struct{}),
		queued: make(map[string]bool), up: true,
	}, nil
}

// Run queues every checkpoint of the threads this host serves that is not
// in the store yet, oldest first (what a former run left: the queue is
// not kept), then starts the uploader and the collector. A failure to list them is logged:
// the checkpoints taken from now on are uploaded all the same, and the
// next start lists them again.
func (r *Replicas) Run(ctx context.Context) {
	if err := r.queueBacklog(ctx); err != nil {
		r.log.Error("list the checkpoints not yet in the snapshot store; they wait for the next start", "error", err)
	}
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
	go r.upload()
	go r.reportPending()
	go r.collector()
}

// queueBacklog queues the checkpoints of this host's threads that are
// not marked replicated.
func (r *Replicas) queueBacklog(ctx context.Context) error {
	served := make(map[meta.ThreadKey]bool)
	tenants := make(map[string]bool)
	err := r.eachBinding(ctx, func(b meta.Binding) {
		if b.HostID == r.cfg.HostID {
			served[b.ThreadKey] = true
			tenants[b.Tenant] = true
		}
	})
	if err != nil {
		return err
	}
	var jobs []job
	var at []meta.Checkpoint // jobs[i]'s checkpoint, to sort by
	for t := range tenants {
		hs, err := r.cfg.Store.ListHistories(ctx, t)
		if err != nil {
			return fmt.Errorf("list the histories of tenant %s: %w", call.Quote(t), err)
		}
		for _, h := range hs {
			if !served[h.ThreadKey] {
				continue
			}
			trees := make(map[string]string, len(h.Checkpoints))
			for _, c := range h.Checkpoints {
				trees[c.ID] = c.Tree
			}
			for _, c := range h.Checkpoints {
				if !c.Replicated {
					jobs = append(jobs, job{k: h.ThreadKey, id: c.ID, tree: c.Tree, base: trees[c.Parent], bytes: ownBytes(c)})
					at = append(at, c)
				}
			}
		}
	}
	// Oldest first, as they were taken: a base goes before what is based
	// on it, so that its packs are reused.
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(at[a].CreatedAt.Compare(at[b].CreatedAt), cmp.Compare(at[a].Seq, at[b].Seq))
	})
	for _, i := range order {
		r.push(jobs[i])
	}
	if len(jobs) > 0 {
		r.log.Info("checkpoints of a former run to copy to the snapshot store", "checkpoints", len(jobs))
	}
	return nil
}

// Replicate queues the upload of checkpoint cp of k, taken after the
// tree base ("" none); see checkpoints.Replicas.
func (r *Replicas) Replicate(k meta.ThreadKey, cp meta.Checkpoint, base string) {
	r.push(job{k: k, id: cp.ID, tree: cp.Tree, base: base, bytes: ownBytes(cp)})
}

func (r *Replicas) push(j job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued[j.key()] {
		return
	}
	r.queued[j.key()] = true
	r.queue = append(r.queue, j)
	r.bytes += j.bytes
	r.pushes++
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// upload is the uploader: the queue's jobs one at a time, in order, each
// until it is in the store (or gone from its history).
func (r *Replicas) upload() {
	defer close(r.done)
	for {
		r.mu.Lock()
		var j job
		ok := len(r.queue) > 0
		if ok {
			j = r.queue[0]
		}
		r.mu.Unlock()
		if !ok {
			select {
			case <-r.wake:
				continue
			case <-r.ctx.Done():
				return
			}
		}
		pause := retryMin
		for {
			err := r.replicate(r.ctx, j)
			if r.ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			r.up, r.lastErr = err == nil, err
			if err == nil {
				r.queue = r.queue[1:]
				delete(r.queued, j.key())
				r.bytes -= j.bytes
			}
			r.mu.Unlock()
			if err == nil {
				break
			}
			// The store may be down for long: the checkpoints that
			// wait and were dropped meanwhile must not keep counting
			// in the backlog until it comes back.
			r.recount(r.ctx)
			wait := pause/2 + rand.N(pause/2)
			r.log.Warn("copy a checkpoint to the snapshot store; trying again", "tenant", j.k.Tenant, "thread", j.k.Thread,
				"checkpoint", j.id, "in", wait.Round(time.Millisecond), "error", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.ctx.Done():
				t.Stop()
				return
			}
			pause = min(2*pause, retryMax)
		}
	}
}

// replicate uploads j's tree, then marks its checkpoint replicated. A
// checkpoint gone from its history (dropped, the thread deleted) is done.
func (r *Replicas) replicate(ctx context.Context, j job) error {
	if live, err := r.mark(ctx, j, false); err != nil || !live {
		return err
	}
	tree, err := snapshot.ParseHash(j.tree)
	if err != nil {
		return fmt.Errorf("checkpoint %s of %s: %w", j.id, call.KeyName(j.k), err)
	}
	// Bounded, so that a collection's grace covers the upload: one that
	// takes longer fails, and starts over.
	refresh, limit := r.uploadBounds()
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	opts := replica.UploadOptions{Cache: r.cfg.CacheDir(j.k.Tenant), Refresh: refresh}
	if j.base != "" {
		if b, err := snapshot.ParseHash(j.base); err == nil {
			opts.Bases = []snapshot.Hash{b}
		}
	}
	repo, err := r.cfg.Repos.Repo(j.k.Tenant)
	if err != nil {
		return err
	}
	// The shared lock keeps a collection from sweeping the tree's objects
	// away while they are read: the checkpoint is in its history now,
	// but may be dropped while it uploads.
	unlock, err := repo.Shared(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint %s of %s: %w", j.id, call.KeyName(j.k), err)
	}
	st, err := replica.Upload(ctx, repo, r.store, tree, opts)
	unlock()
	if err != nil {
		return fmt.Errorf("checkpoint %s of %s: %w", j.id, call.KeyName(j.k), err)
	}
	r.log.Debug("copied a checkpoint to the snapshot store", "tenant", j.k.Tenant, "thread", j.k.Thread, "checkpoint", j.id, "stats", fmt.Sprintf("%+v", st))
	_, err = r.mark(ctx, j, true)
	return err
}

// mark finds j's checkpoint in its history and, with set, marks it
// replicated. It says whether the checkpoint is there and not yet
// replicated (without set).
func (r *Replicas) mark(ctx context.Context, j job, set bool) (live bool, err error) {
	unlock, err := r.cfg.Repos.LockTurn(ctx, j.k)
	if err != nil {
		return false, err
	}
	defer unlock()
	for {
		h, err := r.cfg.Store.GetHistory(ctx, j.k)
		if errors.Is(err, meta.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("checkpoints of %s: read the history: %w", call.KeyName(j.k), err)
		}
		i := slices.IndexFunc(h.Checkpoints, func(c meta.Checkpoint) bool { return c.ID == j.id && c.Tree == j.tree })
		if i < 0 || h.Checkpoints[i].Replicated {
			return false, nil
		}
		if !set {
			return true, nil
		}
		h.Checkpoints = slices.Clone(h.Checkpoints)
		h.Checkpoints[i].Replicated = true
		_, err = r.cfg.Store.PutHistory(ctx, h)
		if errors.Is(err, meta.ErrConflict) {
			continue // written meanwhile (not under the lock: a fork's, a delete's)
		}
		if err != nil {
			return false, fmt.Errorf("checkpoints of %s: write the history: %w", call.KeyName(j.k), err)
		}
		return false, nil
	}
}

// Admit says whether a checkpoint whose own bytes (ownBytes) are own may
// be taken: not when checkpoints wait for the store and their bytes with
// own would pass Config.CacheBytes. The error then says so, beginning
// "the snapshot store is unreachable", for the caller to tell what was
// not done; see checkpoints.Replicas.
//
// A checkpoint is never refused when none waits: one larger than the
// bound alone would otherwise keep its thread from ever checkpointing,
// the store up or not; the backlog is then past the bound by it until it
// is sent. Admit holds nothing for the checkpoint until Replicate queues
// it, so checkpoints of several threads admitted at once may pass the
// bound by what they add together: it bounds the backlog's growth, not
// its every byte.
//
// Before it refuses, it counts the backlog again from the histories
// (recount), if checkpoints were queued since the last count: one
// dropped while it waited (by its thread's count or snapshot quota, when
// a later one was recorded) leaves the queue only when the uploader
// reaches it, which it does not while the store is down. The uploader
// counts again between its attempts too, which sees the checkpoints of
// deleted threads.
func (r *Replicas) Admit(ctx context.Context, own int64) error {
	if r.cfg.CacheBytes == 0 {
		return nil
	}
	over := func() bool { return len(r.queue) > 0 && r.bytes+own > r.cfg.CacheBytes }
	r.mu.Lock()
	again := over() && r.pushes != r.counted
	r.mu.Unlock()
	if again {
		r.recount(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !over() {
		return nil
	}
	state := "it answers, but the uploads fall behind"
	if !r.up {
		state = fmt.Sprintf("the last upload failed: %v", r.lastErr)
	}
	what := "unreachable"
	if r.up {
		what = "unreachable or too slow"
	}
	return fmt.Errorf("the snapshot store is %s: %d checkpoints of this server (%d bytes) wait to be copied to it, and this checkpoint's %d bytes would take them past the server's --snapshot-cache-bytes of %d (%s)",
		what, len(r.queue), r.bytes, own, r.cfg.CacheBytes, state)
}

// recount counts the backlog again from the histories: the jobs whose
// checkpoint is gone from its history (or marked replicated) leave the
// queue, the others count their checkpoint's own bytes as they are now
// (a drop counts a checkpoint based on the dropped one again). The job
// being uploaded, queue[0], stays whatever its state: the uploader alone
// takes it off the queue, by its place. A history that cannot be read
// leaves its jobs as they are. It costs a read of the history of each
// thread with checkpoints waiting.
func (r *Replicas) recount(ctx context.Context) {
	r.mu.Lock()
	gen := r.pushes
	var threads []meta.ThreadKey
	read := make(map[meta.ThreadKey]bool)
	for _, j := range r.queue[min(1, len(r.queue)):] {
		if _, ok := read[j.k]; !ok {
			read[j.k] = false // not read yet
			threads = append(threads, j.k)
		}
	}
	r.mu.Unlock()
	// The kept checkpoints not yet replicated of the threads read, by
	// their jobs' keys.
	live := make(map[string]meta.Checkpoint)
	for _, k := range threads {
		h, err := r.cfg.Store.GetHistory(ctx, k)
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			if ctx.Err() == nil {
				r.log.Warn("count the checkpoints waiting for the snapshot store", "tenant", k.Tenant, "thread", k.Thread, "error", err)
			}
			continue
		}
		read[k] = true // not found: deleted, with its checkpoints
		for _, c := range h.Checkpoints {
			if !c.Replicated {
				live[job{k: k, id: c.ID}.key()] = c
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue[:0:0]
	var total int64
	for i, j := range r.queue {
		if i > 0 && read[j.k] {
			c, ok := live[j.key()]
			if !ok || c.Tree != j.tree {
				delete(r.queued, j.key())
				continue
			}
			j.bytes = ownBytes(c)
		}
		q = append(q, j)
		total += j.bytes
	}
	r.queue, r.bytes, r.counted = q, total, gen
}

// Backlog is the checkpoints waiting for the store (the one being sent
// included), their bytes (as Admit counts them), and the bound on those
// (Config.CacheBytes; 0 none).
func (r *Replicas) Backlog() (checkpoints int, bytes, bound int64) {
	if r == nil {
		return 0, 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue), r.bytes, r.cfg.CacheBytes
}

// Stats are the checkpoints waiting for the store (the one being sent
// included) and whether the last request to it answered, with why not.
func (r *Replicas) Stats() (backlog int, up bool, why error) {
	if r == nil {
		return 0, true, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue), r.up, r.lastErr
}

// Close stops the uploader and the collector and waits for them; an
// upload cut short is finished by the next start, a collection cut short
// is safe (replica.Sweep). nil (no store) is fine.
func (r *Replicas) Close() {
	if r == nil {
		return
	}
	r.cancel()
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if running {
		<-r.done
		<-r.reported
		<-r.collected
	}
}
