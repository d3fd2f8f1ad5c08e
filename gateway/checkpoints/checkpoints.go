package checkpoints

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/keyed"
	"warren/gateway/quota"
	"warren/internal/progress"
	"warren/meta"
	"warren/snapshot"
)

// Checkpoints: undo a turn. A checkpoint records a thread's workspace
// (files with content and mode, links, folders) as a tree in its tenant's
// snapshot repository (package snapshot), and its record in the thread's
// history in the metadata store (meta.History), so they move with the
// thread. A checkpoint reads only what changed since the head (the
// workspace's change set, package fs) while the workspace's entries are
// frozen, so it costs what changed and records one state of the tree.
//
// Undo, redo and revert restore a checkpoint: the state the workspace
// held is checkpointed first if no checkpoint has it, the restore is
// journaled in the history before the first file changes (with the tree
// it begins from), each file is replaced under its path's lock
// (fs.Restorer), and the journal is cleared once the last one changed. A
// restore cut short by a crash or the daemon's stop is finished at the
// next start (or by the thread's next checkpoint call). A restore that
// cannot finish (over the disk quota, a full disk, an object missing or
// corrupt) is put back: what it changed is made again what the tree it
// began from holds, the journal is closed with the reason, and the call
// answers it (failRestore); a crash while putting back has the next start
// finish putting back. Fork makes a new thread of the tenant at a
// checkpoint, through the same journal.
//
// The history's head is the checkpoint the workspace was last made or
// restored at, and each checkpoint names its parent (the head when it was
// taken): undo goes to the head when the workspace changed since it (the
// changes are kept in a checkpoint that a redo goes back to), else to the
// head's parent. A new checkpoint or a revert empties the redo stack.

// Default is how many checkpoints a thread keeps unless its settings or
// Config.Checkpoints say otherwise.
const Default = 100

// Max bounds the checkpoints a thread keeps: its history is one record in
// the store (meta.MaxHistoryBytes).
const Max = 1000

// Config is what the checkpoints need of the daemon: its settings and the
// rooms they call. Every field but the hooks is required.
type Config struct {
	Store  meta.Store
	Logger hclog.Logger
	// Hub serves the workspaces' files (fs.Hub.Files): a checkpoint
	// reads a workspace through it, a restore writes through it.
	Hub *fs.Hub
	// Quotas makes the repositories' folders and hears of each
	// checkpoint (package quota); DiskBytes is a thread's default
	// snapshot quota.
	Quotas   *quota.Quotas
	Threads  Threads
	Commands Commands
	Events   Events
	// Replicas, if not nil, is told of every checkpoint recorded, to copy
	// it to the snapshot store.
	Replicas Replicas
	// Stale reports a refused stale write of thread k (fs.Hub.Files).
	Stale func(k meta.ThreadKey) func(fs.Stale)
	// CheckRun refuses a run id that could not be told apart in logs.
	CheckRun func(run string) error
	// RepoDir is the folder of tenant's snapshot repository.
	RepoDir func(tenant string) string

	// Checkpoints is how many checkpoints a thread keeps unless its
	// settings say otherwise; 0 is Default.
	Checkpoints int
	// Limits bound what one checkpoint reads (snapshot.Limits).
	Limits snapshot.Limits
	// SnapshotQuotaBytes is a thread's snapshot quota unless its settings
	// say otherwise (0: its disk quota), TenantSnapshotQuotaBytes what a
	// tenant's threads hold together (0: no bound).
	SnapshotQuotaBytes, TenantSnapshotQuotaBytes int64
	// HostID is recorded in every checkpoint and restore.
	HostID string

	// CollectHook, if not nil, is told of a tenant's collection's steps
	// (snapshot.WithCollectHook) and "done" when one ended; for tests.
	CollectHook func(tenant, step string)
	// Hold, if not nil, is called by every history call once it holds
	// its thread's locks and its repository's shared lock; for tests.
	Hold func(k meta.ThreadKey)
}

// Checkpoints is the state of the checkpoints: the tenants' snapshot
// repositories, a lock per tenant for its snapshot quota, the collections
// of unreferenced objects under way and the restores' end. New makes one;
// call EndRestores, then Close, when the daemon stops.
type Checkpoints struct {
	cfg      Config // never changed
	log      hclog.Logger
	store    meta.Store
	threads  Threads
	commands Commands

	// tenantQuota holds a lock per tenant, taken while a checkpoint is
	// held against the tenant's snapshot quota (record, forkQuota).
	tenantQuota keyed.Locks[string]

	// ctx ends the collections when Close runs. Never changed.
	ctx    context.Context
	cancel context.CancelFunc
	// restores ends the restores under way once Close has waited its
	// grace for the requests (EndRestores): until then a restore is not
	// cut short by its caller (see restoreContext). Never changed.
	restores    context.Context
	endRestores context.CancelFunc

	// wg counts the collections' goroutines; Add only under mu while
	// closed is not set, so that no Add follows Close's Wait.
	wg sync.WaitGroup

	mu sync.Mutex
	// closed is set by Close: no repository is opened and no
	// collection started after it.
	closed bool
	// repos are the tenants' repositories, opened at first use.
	repos map[string]*snapshot.Repo
	// collecting holds the tenants whose collection runs; again those to
	// collect once more when it ends (something was dropped meanwhile).
	collecting map[string]bool
	again      map[string]bool
}

// New makes the checkpoints' state. It starts no goroutine: a collection
// starts when a checkpoint is dropped, and Close waits for it.
func New(cfg Config) *Checkpoints {
	ctx, cancel := context.WithCancel(context.Background())
	restores, endRestores := context.WithCancel(context.Background())
	return &Checkpoints{
		cfg: cfg, log: cfg.Logger, store: cfg.Store, threads: cfg.Threads, commands: cfg.Commands,
		ctx: ctx, cancel: cancel,
		restores: restores, endRestores: endRestores,
		repos:      make(map[string]*snapshot.Repo),
		collecting: make(map[string]bool),
		again:      make(map[string]bool),
	}
}

// Repo returns tenant's repository, opened if need be; after Close, an
// ErrClosed error.
func (c *Checkpoints) Repo(tenant string) (*snapshot.Repo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, api.ErrClosed
	}
	if r := c.repos[tenant]; r != nil {
		return r, nil
	}
	dir := c.cfg.RepoDir(tenant)
	if err := c.cfg.Quotas.MakeRepoFolder(dir); err != nil {
		return nil, fmt.Errorf("open the snapshot repository of tenant %s: %w", call.Quote(tenant), err)
	}
	opts := []snapshot.Option{snapshot.WithSkip(fs.IsTempName), snapshot.WithLimits(c.cfg.Limits)}
	if hook := c.cfg.CollectHook; hook != nil {
		opts = append(opts, snapshot.WithCollectHook(func(step string) { hook(tenant, step) }))
	}
	r, err := snapshot.Open(dir, opts...)
	if err != nil {
		return nil, fmt.Errorf("open the snapshot repository of tenant %s: %w", call.Quote(tenant), err)
	}
	c.repos[tenant] = r
	return r, nil
}

// EndRestores cuts short the restores under way (their journals have the
// next start finish them). Close calls it once the requests had their
// grace: until then a restore runs to its end whatever its caller does.
func (c *Checkpoints) EndRestores() { c.endRestores() }

// Close stops the collections, waits for them and closes the
// repositories; restores under way are cut short (EndRestores). Call it
// once no request runs, before the store is closed.
func (c *Checkpoints) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.endRestores()
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, r := range c.repos {
		if err := r.Close(); err != nil {
			c.log.Warn("close a snapshot repository", "tenant", t, "error", err)
		}
		delete(c.repos, t)
	}
}

// collect removes, in the background, the objects of tenant's repository
// that no checkpoint of the tenant's threads references any more. A
// collection asked for while one runs makes that one run again.
func (c *Checkpoints) collect(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.collecting[tenant] {
		c.again[tenant] = true
		return
	}
	c.collecting[tenant] = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			c.collectOnce(c.ctx, tenant)
			c.mu.Lock()
			if !c.again[tenant] || c.closed {
				delete(c.collecting, tenant)
				delete(c.again, tenant)
				c.mu.Unlock()
				return
			}
			delete(c.again, tenant)
			c.mu.Unlock()
		}
	}()
}

// collectOnce runs one collection of tenant's repository. It runs beside
// the tenant's checkpoints: it marks without the repository's lock and
// sweeps in short turns that never wait in line for it (snapshot.Collect),
// so a slow checkpoint of one thread delays the sweep, never the others'
// checkpoints.
func (c *Checkpoints) collectOnce(ctx context.Context, tenant string) {
	if hook := c.cfg.CollectHook; hook != nil {
		defer hook(tenant, "done")
	}
	r, err := c.Repo(tenant)
	if err != nil {
		return
	}
	stats, err := r.Collect(ctx, func(ctx context.Context) ([]snapshot.Hash, error) {
		hs, err := c.store.ListHistories(ctx, tenant)
		if err != nil {
			return nil, err
		}
		var roots []snapshot.Hash
		for _, h := range hs {
			for _, c := range h.Checkpoints {
				t, err := snapshot.ParseHash(c.Tree)
				if err != nil {
					return nil, fmt.Errorf("checkpoint %s of %s: %w", c.ID, call.Quote(h.Thread), err)
				}
				roots = append(roots, t)
			}
			if h.Restoring != nil {
				t, err := snapshot.ParseHash(h.Restoring.Tree)
				if err != nil {
					return nil, fmt.Errorf("the restore of %s: %w", call.Quote(h.Thread), err)
				}
				roots = append(roots, t)
				// What a failed restore puts back.
				if from := h.Restoring.From; from != "" {
					t, err := snapshot.ParseHash(from)
					if err != nil {
						return nil, fmt.Errorf("the restore of %s: %w", call.Quote(h.Thread), err)
					}
					roots = append(roots, t)
				}
			}
		}
		if c.cfg.Replicas != nil {
			// The repository is a cache of the store: the trees of
			// checkpoints taken elsewhere are not here until a call
			// needs them, and one not here whole has nothing to keep:
			// what a fetch cut short left goes. (A fetch under way is
			// never swept over: it holds the shared lock, and its tree
			// is whole once it ends.)
			rep := c.cfg.Replicas
			roots = slices.DeleteFunc(roots, func(t snapshot.Hash) bool { return !rep.Whole(tenant, r, t) })
		}
		return roots, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("collect unreferenced snapshot objects", "tenant", tenant, "error", err)
		}
		return
	}
	c.log.Info("collected unreferenced snapshot objects", "tenant", tenant,
		"removed", stats.Removed, "kept", stats.Kept, "freed_bytes", stats.Freed, "took", stats.Duration,
		"sweeps", stats.Sweeps, "locked", stats.Held)
}

// history is a thread's history being worked on, with what working on it
// needs; the thread's checkpoint lock and its repository's shared lock are
// held.
type history struct {
	meta.History
	k     meta.ThreadKey
	b     meta.Binding // the thread's binding, as the call found it
	repo  *snapshot.Repo
	files *fs.Files
}

// mustExist refuses op on a thread that has no record (never bound, or
// deleted): such calls never bind one. A closed thread exists.
func (c *Checkpoints) mustExist(ctx context.Context, op, tenant, thread string) error {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return err
	}
	if _, err := c.store.GetBinding(ctx, k); errors.Is(err, meta.ErrNotFound) {
		return call.NoThread(k, op)
	} else if err != nil {
		return fmt.Errorf("%s of %s: read the binding: %w", op, call.KeyName(k), err)
	}
	return nil
}

// find returns the checkpoint id of h, or nil.
func (h *history) find(id string) *meta.Checkpoint {
	for i := range h.Checkpoints {
		if h.Checkpoints[i].ID == id {
			return &h.Checkpoints[i]
		}
	}
	return nil
}

// withHistory binds the thread, takes its checkpoint lock and its
// repository's shared lock, opens its workspace, reads its history (an
// empty one if it has none), finishes a restore a crash or an error cut
// short, and runs fn. Only op "checkpoint" binds a thread that has no
// record yet (a checkpoint binds lazily, as exec does); for the others
// (undo, redo, revert, diff) a thread that does not exist is not found,
// so that a typo in an id makes no workspace.
func (c *Checkpoints) withHistory(ctx context.Context, op, tenant, thread string, fn func(h *history) error) error {
	if op != "checkpoint" {
		if err := c.mustExist(ctx, op, tenant, thread); err != nil {
			return err
		}
	}
	info, err := c.threads.Bind(ctx, tenant, thread)
	if err != nil {
		return err
	}
	k := info.ThreadKey
	unlock, err := c.threads.LockTurn(ctx, k)
	if err != nil {
		return fmt.Errorf("checkpoints of %s: %w", call.KeyName(k), err)
	}
	defer unlock()
	return c.withHistoryLocked(ctx, k, info.Binding, fn)
}

// withHistoryLocked is withHistory for a bound thread whose checkpoint
// lock is held.
func (c *Checkpoints) withHistoryLocked(ctx context.Context, k meta.ThreadKey, b meta.Binding, fn func(h *history) error) error {
	return c.withShared(ctx, k, func(repo *snapshot.Repo) error {
		if hold := c.cfg.Hold; hold != nil {
			hold(k)
		}
		return c.withHistoryShared(ctx, k, b, repo, fn)
	})
}

// withShared runs fn with k's tenant's repository, holding its shared
// lock.
func (c *Checkpoints) withShared(ctx context.Context, k meta.ThreadKey, fn func(repo *snapshot.Repo) error) error {
	repo, err := c.Repo(k.Tenant)
	if err != nil {
		return err
	}
	release, err := repo.Shared(ctx)
	if err != nil {
		return fmt.Errorf("checkpoints of %s: wait for the repository: %w", call.KeyName(k), err)
	}
	defer release()
	return fn(repo)
}

// openFiles opens the files of b's workspace (fs.Hub.Files); close them
// when done.
func (c *Checkpoints) openFiles(k meta.ThreadKey, b meta.Binding) (*fs.Files, error) {
	root, err := c.threads.RootOf(b)
	if err != nil {
		return nil, err
	}
	return c.cfg.Hub.Files(root, k.Tenant+"/"+k.Thread, c.cfg.Stale(k))
}

// withHistoryShared is withHistoryLocked for a caller that holds repo's
// shared lock already (it is not taken twice: Shared is not reentrant,
// and a collection's sweep may take the lock between the two).
func (c *Checkpoints) withHistoryShared(ctx context.Context, k meta.ThreadKey, b meta.Binding, repo *snapshot.Repo, fn func(h *history) error) error {
	files, err := c.openFiles(k, b)
	if err != nil {
		return err
	}
	defer files.Close()
	hist, err := c.store.GetHistory(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		hist, err = meta.History{ThreadKey: k, NextSeq: 1}, nil
	}
	if err != nil {
		return fmt.Errorf("checkpoints of %s: read the history: %w", call.KeyName(k), err)
	}
	h := &history{History: hist, k: k, b: b, repo: repo, files: files}
	if h.Restoring != nil {
		if err := c.finishRestore(ctx, h); err != nil {
			return err
		}
	}
	return fn(h)
}

// putHistory stores h's history (a compare-and-set on its revision).
func (c *Checkpoints) putHistory(ctx context.Context, h *history) error {
	stored, err := c.store.PutHistory(ctx, h.History)
	if err != nil {
		return fmt.Errorf("checkpoints of %s: write the history: %w", call.KeyName(h.k), err)
	}
	h.History = stored
	return nil
}

// built is the workspace as a build read it.
type built struct {
	tree  snapshot.Hash
	stats snapshot.BuildStats
	set   fs.ChangeSet // the changes taken: commit or give back
	took  time.Duration
}

// buildNow reads the workspace as it is into the repository, with its
// entries frozen: what changed since the head only, when the change set
// is complete and relative to the head, else the whole folder. The caller
// commits the set (files.CommitChanges) once the tree is recorded, or
// gives it back.
func (c *Checkpoints) buildNow(ctx context.Context, h *history) (built, error) {
	start := time.Now()
	// The head is the base; and a new checkpoint's bytes may be counted
	// against any other (settle).
	if head := h.find(h.Head); head != nil {
		if err := c.need(ctx, h, *head); err != nil {
			return built{}, err
		}
	}
	if err := c.needAll(ctx, h); err != nil {
		return built{}, err
	}
	thaw := h.files.Freeze()
	set := h.files.TakeChanges()
	var base snapshot.Hash
	full := true
	if head := h.find(h.Head); head != nil {
		t, err := snapshot.ParseHash(head.Tree)
		if err != nil {
			thaw()
			h.files.ReturnChanges(set)
			return built{}, fmt.Errorf("checkpoint %s of %s: %w", head.ID, call.KeyName(h.k), err)
		}
		base = t
		full = !set.Complete || set.Base != head.ID
		if full {
			why := set.Why
			if set.Complete {
				why = "the changes are relative to another checkpoint"
			}
			c.log.Info("checkpoint reads the whole workspace", "tenant", h.k.Tenant, "thread", h.k.Thread, "why", why)
		}
	}
	changes := make([]snapshot.Change, len(set.Changes))
	for i, c := range set.Changes {
		changes[i] = snapshot.Change{Path: c.Path, Tree: c.Tree}
	}
	if head := h.find(h.Head); head != nil && full {
		ctx = progress.WithTotal(ctx, head.Files) // about as many as last time
	}
	tree, stats, err := h.repo.Build(ctx, h.files.Folder(), base, changes, full)
	thaw()
	if err != nil {
		h.files.ReturnChanges(set)
		if lerr := checkpointLimitError(h.k, err); lerr != nil {
			return built{}, lerr
		}
		return built{}, fmt.Errorf("read the workspace of %s: %w", call.KeyName(h.k), err)
	}
	return built{tree: tree, stats: stats, set: set, took: time.Since(start)}, nil
}

// record adds a checkpoint of tree b to h, makes it the head, empties the
// redo stack, drops what the thread keeps no more (past its count, then
// the oldest that may go while the checkpoints pass the thread's or the
// tenant's snapshot quota, snapquota.go), and stores h. The change set is
// then relative to it. A checkpoint that does not fit the quota even so,
// or that the snapshot store's backlog has no room for (admitUpload), is
// refused and h stays as it was.
func (c *Checkpoints) record(ctx context.Context, h *history, b built, req api.CheckpointRequest, auto bool) (meta.Checkpoint, error) {
	cp := meta.Checkpoint{
		ID: fmt.Sprintf("cp-%d", h.NextSeq), Seq: h.NextSeq,
		Label: req.Label, Turn: req.Turn, Run: req.Run,
		Tree: b.tree.String(), Parent: h.Head, Auto: auto, HostID: c.cfg.HostID,
		CreatedAt: time.Now().UTC(),
		Files:     b.stats.Files + b.stats.Links, Bytes: b.stats.Bytes,
	}
	// The tenant's quota sums every thread's checkpoints: two threads
	// that check it at once must not both fit in the same room.
	var others int64
	if c.cfg.TenantSnapshotQuotaBytes > 0 {
		unlock, err := c.tenantQuota.Lock(ctx, h.k.Tenant)
		if err != nil {
			h.files.ReturnChanges(b.set)
			return meta.Checkpoint{}, fmt.Errorf("checkpoint of %s: %w", call.KeyName(h.k), err)
		}
		defer unlock()
		if others, err = c.tenantSnapshotBytes(ctx, h.k); err != nil {
			h.files.ReturnChanges(b.set)
			return meta.Checkpoint{}, err
		}
	}
	prev := h.History
	h.Checkpoints = append(slices.Clone(h.Checkpoints), cp)
	h.NextSeq++
	h.Head, h.Redo = cp.ID, nil
	dropped := c.retain(h)
	more, err := c.fitSnapshotQuota(ctx, h, cp, prev.Checkpoints, others)
	if err == nil {
		err = c.admitUpload(ctx, h, cp)
	}
	if err != nil {
		h.History = prev
		h.files.ReturnChanges(b.set)
		// The refused tree's new objects go with the next collection.
		c.collect(h.k.Tenant)
		c.log.Info("checkpoint refused", "tenant", h.k.Tenant, "thread", h.k.Thread, "auto", auto, "error", err)
		return meta.Checkpoint{}, err
	}
	dropped = dropped || more
	if c := h.find(cp.ID); c != nil {
		cp = *c
	}
	if err := c.putHistory(ctx, h); err != nil {
		h.History = prev
		h.files.ReturnChanges(b.set)
		return meta.Checkpoint{}, err
	}
	h.files.CommitChanges(cp.ID)
	if dropped {
		c.collect(h.k.Tenant)
	}
	c.cfg.Quotas.Checkpointed(h.k)
	if r := c.cfg.Replicas; r != nil {
		// The parent's tree is what the store most likely holds already
		// (the upload sends only what it lacks); the parent may have
		// been dropped just now, so it is looked for in prev.
		base := ""
		for _, p := range prev.Checkpoints {
			if p.ID == cp.Parent {
				base = p.Tree
			}
		}
		r.Replicate(h.k, cp, base)
	}
	return cp, nil
}

// keepOf is how many checkpoints thread b keeps.
func (c *Checkpoints) keepOf(s meta.Settings) int {
	switch {
	case s.Checkpoints > 0:
		return s.Checkpoints
	case c.cfg.Checkpoints > 0:
		return c.cfg.Checkpoints
	}
	return Default
}

// retain drops h's oldest checkpoints past what its thread keeps; the
// head, its parent, the redo stack and a restore's target stay whatever
// their age (pinnedOf). Those based on a dropped one are counted again
// (snapquota.go).
func (c *Checkpoints) retain(h *history) bool {
	keep := c.keepOf(h.b.Settings)
	if len(h.Checkpoints) <= keep {
		return false
	}
	pinned := pinnedOf(h)
	excess := len(h.Checkpoints) - keep
	cps := h.Checkpoints
	for i := 0; i < len(cps) && excess > 0; {
		if pinned[cps[i].ID] {
			i++
			continue
		}
		cps = dropCheckpoint(cps, i)
		excess--
	}
	h.Checkpoints = cps
	return true
}

// checkpoint takes a checkpoint of a thread's workspace.
func (c *Checkpoints) checkpoint(ctx context.Context, tenant, thread string, req api.CheckpointRequest) (api.CheckpointResponse, error) {
	if err := c.checkRequest(req); err != nil {
		return api.CheckpointResponse{}, err
	}
	var out api.CheckpointResponse
	err := c.withHistory(ctx, "checkpoint", tenant, thread, func(h *history) error {
		b, err := c.buildNow(ctx, h)
		if err != nil {
			return err
		}
		parent := h.find(h.Head)
		cp, err := c.record(ctx, h, b, req, false)
		if err != nil {
			return err
		}
		out = api.CheckpointResponse{
			Checkpoint: api.CheckpointInfo{Checkpoint: cp, Head: true},
			Cost: api.CheckpointCost{
				Full: b.stats.Full, Read: b.stats.Read, NewObjects: b.stats.NewObjects, NewBytes: b.stats.NewBytes,
				Millis: float64(b.took.Microseconds()) / 1000,
			},
		}
		c.log.Info("checkpoint taken", "tenant", h.k.Tenant, "thread", h.k.Thread, "checkpoint", cp.ID,
			"full", b.stats.Full, "read", b.stats.Read, "new_objects", b.stats.NewObjects, "took", b.took)
		// The paths of the event cost a diff: made only when some
		// stream wants the thread's events.
		if c.cfg.Events.Wants(h.k) {
			var paths []string
			if parent != nil {
				paths, _ = c.changedPaths(ctx, h.repo, parent.Tree, cp.Tree)
			} else {
				paths, _ = c.changedPaths(ctx, h.repo, "", cp.Tree)
			}
			c.emitPaths(api.Event{Type: api.EventCheckpointCreated, Tenant: h.k.Tenant, Thread: h.k.Thread,
				Actor: call.Actor(ctx), Checkpoint: cp.ID, Label: cp.Label}, paths, "changed since the checkpoint before")
		}
		return nil
	})
	return out, err
}

// checkRequest bounds a checkpoint's label and run.
func (c *Checkpoints) checkRequest(req api.CheckpointRequest) error {
	if err := call.CheckText("label", req.Label, call.MaxLabelBytes); err != nil {
		return err
	}
	if req.Run != "" {
		if err := c.cfg.CheckRun(req.Run); err != nil {
			return err
		}
	}
	if req.Turn < 0 {
		return fmt.Errorf("%w: turn must not be negative", api.ErrInvalid)
	}
	return nil
}

// changedPaths lists the paths that differ between two trees ("" is the
// empty tree), sorted.
func (c *Checkpoints) changedPaths(ctx context.Context, r *snapshot.Repo, from, to string) ([]string, error) {
	a, b, err := parseTrees(from, to)
	if err != nil {
		return nil, err
	}
	ds, err := r.Diff(ctx, a, b)
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(ds))
	for _, d := range ds {
		if len(paths) == 0 || paths[len(paths)-1] != d.Path {
			paths = append(paths, d.Path)
		}
	}
	return paths, nil
}

func parseTrees(from, to string) (a, b snapshot.Hash, err error) {
	if from != "" {
		if a, err = snapshot.ParseHash(from); err != nil {
			return a, b, err
		}
	}
	if to != "" {
		b, err = snapshot.ParseHash(to)
	}
	return a, b, err
}

// emitPaths emits ev with paths, at most api.MaxEventPaths of them; its
// message says how many there were, and what they are.
func (c *Checkpoints) emitPaths(ev api.Event, paths []string, what string) {
	ev.Message = fmt.Sprintf("%d paths %s", len(paths), what)
	if len(paths) > api.MaxEventPaths {
		ev.Message += fmt.Sprintf(" (the first %d listed)", api.MaxEventPaths)
		paths = paths[:api.MaxEventPaths]
	}
	ev.Paths = paths
	c.cfg.Events.Emit(ev)
}

// listCheckpoints lists a thread's checkpoints, oldest first.
func (c *Checkpoints) listCheckpoints(ctx context.Context, tenant, thread string) (api.CheckpointsResponse, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.CheckpointsResponse{}, err
	}
	if err := c.mustExist(ctx, "the checkpoint list", tenant, thread); err != nil {
		return api.CheckpointsResponse{}, err
	}
	if _, err := c.threads.Show(ctx, tenant, thread); err != nil { // pinned elsewhere
		return api.CheckpointsResponse{}, err
	}
	h, err := c.store.GetHistory(ctx, k)
	replicating := c.cfg.Replicas != nil
	if errors.Is(err, meta.ErrNotFound) {
		return api.CheckpointsResponse{Checkpoints: []api.CheckpointInfo{}, Replicating: replicating}, nil
	}
	if err != nil {
		return api.CheckpointsResponse{}, fmt.Errorf("checkpoints of %s: read the history: %w", call.KeyName(k), err)
	}
	out := api.CheckpointsResponse{
		Checkpoints: make([]api.CheckpointInfo, 0, len(h.Checkpoints)), Head: h.Head, Redo: h.Redo, Replicating: replicating,
	}
	if f := h.FailedRestore; f != nil {
		out.FailedRestore = &api.FailedRestore{Op: f.Op, To: f.To, Reason: f.Failed, StartedAt: f.StartedAt, EndedAt: f.EndedAt}
	}
	for _, c := range h.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, api.CheckpointInfo{Checkpoint: c, Head: c.ID == h.Head})
	}
	return out, nil
}

// undo restores the checkpoint before the workspace's state: the head if
// the workspace changed since it, else the head's parent.
func (c *Checkpoints) undo(ctx context.Context, tenant, thread string, force bool) (api.RestoreResponse, error) {
	var out api.RestoreResponse
	err := c.withHistory(ctx, "undo", tenant, thread, func(h *history) error {
		head := h.find(h.Head)
		if head == nil {
			return call.Refuse(api.ErrConflict, "Nothing to undo: this thread has no checkpoint.")
		}
		now, saved, err := c.saveState(ctx, h, "before undo")
		if err != nil {
			return err
		}
		var target *meta.Checkpoint
		redo := slices.Clone(h.Redo)
		if saved == "" {
			target = h.find(head.Parent)
			if target == nil {
				return call.Refuse(api.ErrConflict, fmt.Sprintf("Nothing to undo: the workspace is at %s, the oldest checkpoint this thread keeps.", head.ID))
			}
			redo = append(redo, head.ID)
		} else {
			target = h.find(head.ID)
			redo = []string{saved}
		}
		out, err = c.restoreTo(ctx, h, "undo", now, *target, redo, force)
		out.Saved = saved
		return err
	})
	return out, err
}

// redo restores the checkpoint the last undo left.
func (c *Checkpoints) redo(ctx context.Context, tenant, thread string, force bool) (api.RestoreResponse, error) {
	var out api.RestoreResponse
	err := c.withHistory(ctx, "redo", tenant, thread, func(h *history) error {
		if len(h.Redo) == 0 {
			return call.Refuse(api.ErrConflict, "Nothing to redo.")
		}
		b, err := c.buildNow(ctx, h)
		if err != nil {
			return err
		}
		head := h.find(h.Head)
		if head == nil || head.Tree != b.tree.String() {
			h.files.ReturnChanges(b.set)
			return call.Refuse(api.ErrConflict, "The workspace changed since the last undo; a redo would lose those changes. Take a checkpoint, or revert to a checkpoint.")
		}
		h.files.CommitChanges(head.ID)
		id := h.Redo[len(h.Redo)-1]
		target := h.find(id)
		if target == nil {
			return fmt.Errorf("redo %s: checkpoint %s is not in the history", call.KeyName(h.k), id)
		}
		out, err = c.restoreTo(ctx, h, "redo", b.tree, *target, slices.Clone(h.Redo[:len(h.Redo)-1]), force)
		return err
	})
	return out, err
}

// revert restores checkpoint id.
func (c *Checkpoints) revert(ctx context.Context, tenant, thread, id string, force bool) (api.RestoreResponse, error) {
	if id == "" {
		return api.RestoreResponse{}, fmt.Errorf("%w: checkpoint is required", api.ErrInvalid)
	}
	if err := call.CheckText("checkpoint", id, call.MaxLabelBytes); err != nil {
		return api.RestoreResponse{}, err
	}
	var out api.RestoreResponse
	err := c.withHistory(ctx, "revert", tenant, thread, func(h *history) error {
		if h.find(id) == nil {
			return call.Refuse(api.ErrNotFound, fmt.Sprintf("This thread has no checkpoint %s.", call.Quote(id)))
		}
		now, saved, err := c.saveState(ctx, h, "before revert to "+id)
		if err != nil {
			return err
		}
		out, err = c.restoreTo(ctx, h, "revert", now, *h.find(id), nil, force)
		out.Saved = saved
		return err
	})
	return out, err
}

// saveState reads the workspace and, if no checkpoint holds what it holds
// (it changed since the head), records it in an automatic checkpoint,
// whose id it returns. It returns the workspace's tree.
func (c *Checkpoints) saveState(ctx context.Context, h *history, label string) (snapshot.Hash, string, error) {
	b, err := c.buildNow(ctx, h)
	if err != nil {
		return snapshot.Hash{}, "", err
	}
	if head := h.find(h.Head); head != nil && head.Tree == b.tree.String() {
		h.files.CommitChanges(head.ID)
		return b.tree, "", nil
	}
	cp, err := c.record(ctx, h, b, api.CheckpointRequest{Label: label}, true)
	if err != nil {
		return snapshot.Hash{}, "", err
	}
	return b.tree, cp.ID, nil
}

// restoreTo makes the workspace, which holds the tree now, what checkpoint
// to holds, and leaves to as the head and redo as the redo stack. Running
// commands and jobs refuse it, or are stopped first with force.
func (c *Checkpoints) restoreTo(ctx context.Context, h *history, op string, now snapshot.Hash, to meta.Checkpoint, redo []string, force bool) (api.RestoreResponse, error) {
	// The target is here before anything changes.
	if err := c.need(ctx, h, to); err != nil {
		return api.RestoreResponse{}, err
	}
	ctx, done := c.restoreContext(ctx)
	defer done()
	stopped, err := c.quiesce(ctx, h.k, op, to.ID, force)
	if err != nil {
		return api.RestoreResponse{}, err
	}
	defer c.commands.EndRestore(h.k)
	h.Restoring = &meta.Restore{Op: op, To: to.ID, Tree: to.Tree, Head: to.ID, Redo: redo, HostID: c.cfg.HostID, StartedAt: time.Now().UTC(), From: now.String()}
	if err := c.putHistory(ctx, h); err != nil {
		h.Restoring = nil
		return api.RestoreResponse{}, err
	}
	changed, err := c.applyRestore(ctx, h, now)
	if err != nil {
		return api.RestoreResponse{}, err
	}
	return api.RestoreResponse{Op: op, To: to.ID, Changed: changed, Stopped: stopped, Head: h.Head, Redo: h.Redo}, nil
}

// applyRestore makes the workspace, which held the tree now, what h's
// journaled restore asks for, then clears the journal. A restore that
// cannot finish (over the disk quota, a full disk, an object missing or
// corrupt) is put back (failRestore): the workspace is left as it was
// before the restore, the journal is closed with the reason and the error
// says it. Only the daemon's stop, which cuts the restore short, leaves
// the journal for the next start to finish.
func (c *Checkpoints) applyRestore(ctx context.Context, h *history, now snapshot.Hash) ([]string, error) {
	rs := *h.Restoring
	if rs.Failed != "" {
		// A put-back that a crash or a stop cut short: finished, never
		// the restore itself.
		return nil, c.failRestore(ctx, h, now, nil, nil, errors.New(rs.Failed))
	}
	to, err := snapshot.ParseHash(rs.Tree)
	if err != nil {
		return nil, c.failRestore(ctx, h, now, nil, nil, fmt.Errorf("the journal's tree: %w", err))
	}
	// A journal a former host left (or one of a fork) may name a tree
	// this server has yet to bring: put back, nothing changed, if it
	// cannot.
	if err := c.needTree(ctx, h, rs.To, rs.HostID, true, to); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, c.failRestore(ctx, h, now, nil, nil, err)
	}
	rec := snapshot.Record(h.files.Restorer())
	deltas, err := h.repo.Diff(ctx, now, to)
	var changed []string
	if err == nil {
		changed, err = h.repo.Apply(ctx, deltas, rec)
	}
	if err == nil {
		err = h.files.Restorer().Sync()
	}
	if err != nil {
		if ctx.Err() != nil {
			c.log.Error("restore cut short by the daemon's stop; the next start finishes it", "tenant", h.k.Tenant, "thread", h.k.Thread,
				"op", rs.Op, "to", rs.To, "error", err)
			return nil, fmt.Errorf("restore %s to %s (cut short; the next start finishes it): %w", call.KeyName(h.k), rs.To, err)
		}
		return nil, c.failRestore(ctx, h, now, rec.Back(deltas), failedDelta(deltas, rec.Failed), err)
	}
	h.Restoring = nil
	h.Head, h.Redo = rs.Head, rs.Redo
	if err := c.putHistory(ctx, h); err != nil {
		h.Restoring = &rs
		return nil, err
	}
	h.files.CommitChanges(rs.To)
	if changed == nil {
		changed = []string{}
	}
	c.log.Info("workspace restored", "tenant", h.k.Tenant, "thread", h.k.Thread, "op", rs.Op, "to", rs.To, "changed", len(changed))
	c.emitPaths(api.Event{Type: api.EventThreadRestored, Tenant: h.k.Tenant, Thread: h.k.Thread, Actor: call.Actor(ctx),
		Checkpoint: rs.To, Op: rs.Op}, changed, "restored ("+rs.Op+" to "+rs.To+")")
	return changed, nil
}

// restoreContext is the context a restore runs under: ctx's values, but
// not its end. A restore, once begun, runs to its end whatever its caller
// does: a client that hangs up or gives up (a takeover's first command,
// waiting on a big restore, may) would otherwise leave the workspace half
// restored until the next call finishes it. Only the daemon's stop cuts
// it short, after the grace Close gives the requests; the journal then
// has the next start finish it.
func (c *Checkpoints) restoreContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.restores, cancel)
	return rctx, func() {
		stop()
		cancel()
	}
}

// finishRestore finishes the restore h's journal records, which a crash
// or the daemon's stop cut short: the whole workspace is read, since what
// the restore changed before it stopped is not known, and made what the
// journal asks for; a restore that cannot finish, or one whose journal
// says it failed, is put back and closed (failRestore) and the call goes
// on.
func (c *Checkpoints) finishRestore(ctx context.Context, h *history) error {
	ctx, done := c.restoreContext(ctx)
	defer done()
	rs := h.Restoring
	c.log.Warn("finishing a restore that was cut short", "tenant", h.k.Tenant, "thread", h.k.Thread, "op", rs.Op, "to", rs.To, "started", rs.StartedAt)
	if _, err := c.quiesce(ctx, h.k, "finish the "+rs.Op, rs.To, true); err != nil {
		return err
	}
	defer c.commands.EndRestore(h.k)
	thaw := h.files.Freeze()
	set := h.files.TakeChanges()
	now, _, err := h.repo.Build(ctx, h.files.Folder(), snapshot.Hash{}, nil, true)
	thaw()
	if err != nil {
		h.files.ReturnChanges(set)
		return fmt.Errorf("finish the restore of %s: read the workspace: %w", call.KeyName(h.k), err)
	}
	if _, err := c.applyRestore(ctx, h, now); err != nil && h.Restoring != nil {
		return err
	}
	// Finished, or failed and ended cleanly (put back, the journal
	// closed, the event sent): the call that found it goes on.
	return nil
}

// quiesce makes sure no command or job of k runs while its workspace is
// restored, and that none starts until EndRestore: with force it stops
// those that run, else it refuses. It returns what it stopped.
func (c *Checkpoints) quiesce(ctx context.Context, k meta.ThreadKey, op, to string, force bool) ([]string, error) {
	why := fmt.Sprintf("the workspace is being restored (%s to %s)", op, to)
	execs := c.commands.BeginRestore(k, why)
	jobs := c.commands.RunningJobIDs(k)
	if len(execs)+len(jobs) == 0 {
		return nil, nil
	}
	running := append(slices.Clone(execs), jobs...)
	if !force {
		c.commands.EndRestore(k)
		return nil, call.Refuse(api.ErrBusy, fmt.Sprintf("Cannot %s while commands of this thread run (%s). Stop them, or ask again with force to stop them first.", op, joinIDs(running)))
	}
	c.commands.NoteStopping(k, fmt.Sprintf("the workspace was restored (%s to %s)", op, to))
	c.commands.CloseJail(k)
	c.commands.WaitThreadJobs(k)
	c.log.Info("stopped the thread's commands for a restore", "tenant", k.Tenant, "thread", k.Thread, "stopped", running)
	return running, nil
}

// joinIDs lists ids for a message.
func joinIDs(ids []string) string {
	if len(ids) > 10 {
		return fmt.Sprintf("%s and %d more", joinIDs(ids[:10]), len(ids)-10)
	}
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ", "
		}
		s += id
	}
	return s
}

// diff says what makes checkpoint from into checkpoint to; "now" (or "")
// for to is the workspace as it is, and from defaults to the head.
func (c *Checkpoints) diff(ctx context.Context, tenant, thread, from, to string, text bool) (api.DiffResponse, error) {
	for _, v := range []string{from, to} {
		if err := call.CheckText("checkpoint", v, call.MaxLabelBytes); err != nil {
			return api.DiffResponse{}, err
		}
	}
	if to == "" {
		to = "now"
	}
	var out api.DiffResponse
	err := c.withHistory(ctx, "diff", tenant, thread, func(h *history) error {
		if from == "" {
			from = h.Head
			if from == "" {
				return call.Refuse(api.ErrConflict, "This thread has no checkpoint to compare with.")
			}
		}
		tree := func(id string) (snapshot.Hash, error) {
			if id == "now" {
				b, err := c.buildNow(ctx, h)
				if err != nil {
					return snapshot.Hash{}, err
				}
				if head := h.find(h.Head); head != nil && head.Tree == b.tree.String() {
					h.files.CommitChanges(head.ID)
				} else {
					h.files.ReturnChanges(b.set)
				}
				return b.tree, nil
			}
			cp := h.find(id)
			if cp == nil {
				return snapshot.Hash{}, call.Refuse(api.ErrNotFound, fmt.Sprintf("This thread has no checkpoint %s.", call.Quote(id)))
			}
			if err := c.need(ctx, h, *cp); err != nil {
				return snapshot.Hash{}, err
			}
			return snapshot.ParseHash(cp.Tree)
		}
		a, err := tree(from)
		if err != nil {
			return err
		}
		b, err := tree(to)
		if err != nil {
			return err
		}
		deltas, err := h.repo.Diff(ctx, a, b)
		if err != nil {
			return fmt.Errorf("diff %s: %w", call.KeyName(h.k), err)
		}
		out = api.DiffResponse{From: from, To: to, Added: []string{}, Removed: []string{}, Modified: []string{}}
		budget := maxDiffText
		for _, d := range deltas {
			switch d.Op {
			case snapshot.Added:
				out.Added = append(out.Added, d.Path)
			case snapshot.Removed:
				out.Removed = append(out.Removed, d.Path)
			default:
				out.Modified = append(out.Modified, d.Path)
			}
			if !text || budget <= 0 || d.Old.Kind == snapshot.KindDir || d.New.Kind == snapshot.KindDir {
				continue
			}
			s, ok, err := h.repo.TextDiff(ctx, d, 3)
			if err != nil {
				return fmt.Errorf("diff %s: %s: %w", call.KeyName(h.k), d.Path, err)
			}
			if ok && s != "" {
				budget -= len(s)
				out.Diffs = append(out.Diffs, api.FileDiff{Path: d.Path, Diff: s})
			}
		}
		return nil
	})
	return out, err
}

// maxDiffText bounds the text diffs one answer carries.
const maxDiffText = 8 << 20

// fork makes a new thread of the tenant whose workspace starts at a
// checkpoint of this one (the head by default), sharing its objects.
//
// It holds both threads' checkpoint locks, taken in one order (two forks
// the other way round cannot wait for each other), then the repository's
// shared lock: the source's objects stay until the new thread's history
// names them.
func (c *Checkpoints) fork(ctx context.Context, tenant, thread string, req api.ForkRequest) (api.ForkResponse, error) {
	if err := call.CheckText("checkpoint", req.Checkpoint, call.MaxLabelBytes); err != nil {
		return api.ForkResponse{}, err
	}
	if err := c.mustExist(ctx, "fork", tenant, thread); err != nil {
		return api.ForkResponse{}, err
	}
	info, err := c.threads.Bind(ctx, tenant, thread)
	if err != nil {
		return api.ForkResponse{}, err
	}
	k := info.ThreadKey
	newThread := req.Thread
	if newThread == "" {
		var b [4]byte
		rand.Read(b[:])
		newThread = k.Thread + "-fork-" + hex.EncodeToString(b[:])
	}
	nk, err := call.ThreadKey(k.Tenant, newThread)
	if err != nil {
		return api.ForkResponse{}, err
	}
	if nk == k {
		return api.ForkResponse{}, call.Refuse(api.ErrConflict, "A thread cannot be forked into itself; name a new thread.")
	}
	// A fork whose restore could not finish removes the thread it made,
	// once its locks are let go (Threads.Delete takes them).
	unmake := false
	defer func() {
		if !unmake {
			return
		}
		if err := c.threads.Delete(context.WithoutCancel(ctx), nk.Tenant, nk.Thread); err != nil {
			c.log.Error("remove the thread of a fork that failed", "tenant", nk.Tenant, "thread", nk.Thread, "error", err)
		}
	}()
	first, second := k, nk
	if second.Tenant < first.Tenant || second.Tenant == first.Tenant && second.Thread < first.Thread {
		first, second = second, first
	}
	for _, key := range []meta.ThreadKey{first, second} {
		unlock, err := c.threads.LockTurn(ctx, key)
		if err != nil {
			return api.ForkResponse{}, fmt.Errorf("fork %s: %w", call.KeyName(k), err)
		}
		defer unlock()
	}
	repo, err := c.Repo(k.Tenant)
	if err != nil {
		return api.ForkResponse{}, err
	}
	release, err := repo.Shared(ctx)
	if err != nil {
		return api.ForkResponse{}, fmt.Errorf("fork %s: wait for the repository: %w", call.KeyName(k), err)
	}
	defer release()

	var src meta.Checkpoint
	err = c.withHistoryShared(ctx, k, info.Binding, repo, func(h *history) error {
		id := req.Checkpoint
		if id == "" {
			id = h.Head
		}
		cp := h.find(id)
		if cp == nil {
			if id == "" {
				return call.Refuse(api.ErrConflict, "This thread has no checkpoint to fork from.")
			}
			return call.Refuse(api.ErrNotFound, fmt.Sprintf("This thread has no checkpoint %s.", call.Quote(id)))
		}
		src = *cp
		return c.need(ctx, h, src)
	})
	if err != nil {
		return api.ForkResponse{}, err
	}
	if _, err := c.store.GetBinding(ctx, nk); err == nil {
		return api.ForkResponse{}, call.Refuse(api.ErrConflict, fmt.Sprintf("Thread %s exists already; fork into a new thread.", call.Quote(nk.Thread)))
	} else if !errors.Is(err, meta.ErrNotFound) {
		return api.ForkResponse{}, fmt.Errorf("fork into %s: read binding: %w", call.KeyName(nk), err)
	}
	if _, err := c.store.GetHistory(ctx, nk); err == nil {
		return api.ForkResponse{}, fmt.Errorf("fork into %s: %w: the thread has a history", call.KeyName(nk), api.ErrConflict)
	} else if !errors.Is(err, meta.ErrNotFound) {
		return api.ForkResponse{}, fmt.Errorf("fork into %s: read history: %w", call.KeyName(nk), err)
	}
	cp := src
	cp.ID, cp.Seq, cp.Parent, cp.Auto = "cp-1", 1, "", false
	// The new thread holds the whole tree: nothing of its own is its base.
	cp.OwnBase, cp.OwnBytes = "", recount
	one := []meta.Checkpoint{cp}
	if err := settle(ctx, repo, one); err != nil {
		return api.ForkResponse{}, fmt.Errorf("fork %s: %w", call.KeyName(k), err)
	}
	cp = one[0]
	cp.Label = fmt.Sprintf("fork of %s at %s", k.Thread, src.ID)
	cp.HostID, cp.CreatedAt = c.cfg.HostID, time.Now().UTC()
	unlockQuota, err := c.forkQuota(ctx, nk, cp)
	if err != nil {
		return api.ForkResponse{}, err
	}
	defer unlockQuota()
	ninfo, err := c.threads.Bind(ctx, nk.Tenant, nk.Thread)
	if err != nil {
		return api.ForkResponse{}, err
	}
	err = c.withHistoryShared(ctx, nk, ninfo.Binding, repo, func(h *history) error {
		h.Checkpoints = []meta.Checkpoint{cp}
		h.NextSeq = 2
		h.Restoring = &meta.Restore{Op: "fork", To: cp.ID, Tree: cp.Tree, Head: cp.ID, HostID: c.cfg.HostID, StartedAt: cp.CreatedAt,
			From: snapshot.Hash{}.String()}
		if err := c.putHistory(ctx, h); err != nil {
			return err
		}
		// The new workspace is empty.
		_, err := c.applyRestore(ctx, h, snapshot.Hash{})
		unmake = err != nil && h.Restoring == nil // failed, and put back
		return err
	})
	if err != nil {
		return api.ForkResponse{}, err
	}
	_, mountPath, err := c.threads.Paths(nk)
	if err != nil {
		return api.ForkResponse{}, err
	}
	c.log.Info("thread forked", "tenant", k.Tenant, "thread", k.Thread, "checkpoint", src.ID, "new_thread", nk.Thread)
	return api.ForkResponse{Binding: ninfo, MountPath: mountPath, Checkpoint: cp.ID, From: src.ID}, nil
}

// DropHistory forgets a deleted thread's checkpoints, and collects their
// objects that no other thread uses, in the repository and in the
// snapshot store (Replicas.Dropped). The thread's checkpoint lock
// (Threads.LockTurn) is held.
func (c *Checkpoints) DropHistory(ctx context.Context, k meta.ThreadKey) error {
	if err := c.store.DeleteHistory(ctx, k); err != nil {
		return fmt.Errorf("delete the history of %s: %w", call.KeyName(k), err)
	}
	c.collect(k.Tenant)
	if r := c.cfg.Replicas; r != nil {
		r.Dropped(k.Tenant)
	}
	return nil
}

// FinishRestore finishes the restore that thread b's history journals,
// if any, which a crash or the daemon's stop cut short (at start, for a
// thread the start mounts again). The caller makes sure that no
// checkpoint call of the thread runs meanwhile: each binds first, and the
// thread's first bind since the start waits for the start's part.
func (c *Checkpoints) FinishRestore(ctx context.Context, k meta.ThreadKey, b meta.Binding) error {
	return c.withHistoryLocked(ctx, k, b, func(*history) error { return nil })
}

// FinishMoved finishes, for a thread this gateway just took over, the
// restore its former host was making when it died, before the thread's
// first command runs here. The thread's lock is held (the takeover's
// bind): no checkpoint call of the thread can run meanwhile, since each
// binds first. A failure is logged; the journal stays, and the thread's
// next checkpoint call tries again.
func (c *Checkpoints) FinishMoved(ctx context.Context, b meta.Binding) {
	h, err := c.store.GetHistory(ctx, b.ThreadKey)
	if err != nil || h.Restoring == nil {
		return
	}
	if err := c.withHistoryLocked(ctx, b.ThreadKey, b, func(*history) error { return nil }); err != nil {
		c.log.Error("finish the restore a former host left cut short", "tenant", b.Tenant, "thread", b.Thread, "error", err)
	}
}
