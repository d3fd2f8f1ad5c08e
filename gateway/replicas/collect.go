package replicas

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// The collection of the store: what the servers that share it no longer
// reference goes (replica.Sweep), one server at a time.
const (
	// claimName is the claim (meta.Claim) the servers take in turn to
	// collect the store.
	claimName = "snapshot-store-collection"
	// defaultCollectEvery is the time between collections of the store
	// across the servers (Config.CollectEvery).
	defaultCollectEvery = time.Hour
	// defaultGrace is Config.Grace: a day, far past any upload.
	defaultGrace = 24 * time.Hour
	// sweepFor bounds one collection, and is how long its claim lasts: a
	// server that dies while it collects holds the claim no longer.
	sweepFor = 30 * time.Minute
	// busyRetry is when a collection asked for (Dropped) while another
	// server's runs is tried again: that one may have listed the live
	// trees before the delete.
	busyRetry = time.Minute
	// bindingsPage is the page of the bindings read to find the tenants.
	bindingsPage = 500
)

// grace is the collection's grace (replica.SweepOptions.Grace).
func (r *Replicas) grace() time.Duration { return cmp0(r.cfg.Grace, defaultGrace) }

func cmp0(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// uploadBounds are an upload's replica.UploadOptions.Refresh and the
// time it may take, so that both together stay under the grace (see
// replica's package doc, Collection): a quarter, and a half. A grace
// under a minute is for tests: uploads are then not bounded.
func (r *Replicas) uploadBounds() (refresh, limit time.Duration) {
	g := r.grace()
	if g < time.Minute {
		return 0, 0
	}
	return g / 4, g / 2
}

// Dropped tells the collector that a thread of tenant was deleted (see
// checkpoints.Replicas): its trees' objects in the store go at the next
// collection, begun now. It returns at once.
func (r *Replicas) Dropped(tenant string) {
	if r == nil {
		return
	}
	select {
	case r.collectNow <- struct{}{}:
	default: // one is asked for already
	}
}

// collector runs a collection every CollectEvery (drawn in [3/4, 5/4) of
// it, so that servers started together do not all ask at once), and one
// when Dropped asks.
func (r *Replicas) collector() {
	defer close(r.collected)
	every := cmp0(r.cfg.CollectEvery, defaultCollectEvery)
	next := func() time.Duration { return every*3/4 + rand.N(every/2+1) }
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		asked := false
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		case <-r.collectNow:
			asked = true
		}
		wait := next()
		if busy := r.collectOnce(r.ctx, asked); busy && asked {
			wait = min(wait, busyRetry)
		}
		t.Reset(wait)
	}
}

// collectOnce takes the claim and collects the store, unless another
// server holds the claim, or (unless asked) collected it less than
// CollectEvery ago. busy says another server held it.
//
// The claim makes the servers collect in turn, not for safety: two
// sweeps at once (a clock off, a claim expired under a slow one) are
// safe, each writing its hold records before it deletes and stopping at
// a manifest the other deleted (replica.Sweep). It only spares the store
// and the metadata store the work twice over. No checkpoint lock is
// taken: the sweep reads the histories, and a checkpoint taken meanwhile
// is safe by the sweep's own rules, so it never stalls a checkpoint.
func (r *Replicas) collectOnce(ctx context.Context, asked bool) (busy bool) {
	every := cmp0(r.cfg.CollectEvery, defaultCollectEvery)
	now := time.Now()
	c, err := r.cfg.Store.GetClaim(ctx, claimName)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		c = meta.Claim{Name: claimName}
	case err != nil:
		r.collectFailed(fmt.Errorf("read the claim of the collection: %w", err))
		return false
	case c.Holder != "" && c.Holder != r.cfg.HostID && now.Before(c.Until):
		r.log.Debug("the snapshot store is being collected by another server", "server", c.Holder)
		return true
	case !asked && now.Sub(c.Done) < every:
		return false // collected lately, by this server or another
	}
	c.Holder, c.Until = r.cfg.HostID, now.Add(sweepFor)
	c, err = r.cfg.Store.PutClaim(ctx, c)
	if errors.Is(err, meta.ErrConflict) || errors.Is(err, meta.ErrExists) {
		return true // another server took it first
	}
	if err != nil {
		r.collectFailed(fmt.Errorf("take the claim of the collection: %w", err))
		return false
	}

	sctx, cancel := context.WithTimeout(ctx, sweepFor)
	st, err := replica.Sweep(sctx, r.store, r.liveTrees, replica.SweepOptions{Grace: r.grace()})
	cancel()
	if ctx.Err() != nil {
		return false // closing: the claim runs out
	}
	// Let go of the claim (a conflict: it ran out, and another server
	// took it; it is theirs).
	c.Holder, c.Until = "", time.Time{}
	if err == nil {
		c.Done = time.Now()
	}
	if _, perr := r.cfg.Store.PutClaim(ctx, c); perr != nil && !errors.Is(perr, meta.ErrConflict) {
		r.log.Warn("let go of the claim of the snapshot store's collection; it runs out", "error", perr)
	}
	if err == nil {
		err = r.sweepPending(ctx, now)
	}
	if err != nil {
		r.collectFailed(err)
		return false
	}
	r.log.Info("collected the snapshot store", "manifests_deleted", st.Manifests, "manifests_restored", st.Restored,
		"packs_deleted", st.Packs, "freed_bytes", st.Freed, "uploads_aborted", st.Aborted,
		"manifests_kept", st.KeptManifests, "packs_kept", st.KeptPacks, "packs_young", st.Young, "packs_held", st.Held,
		"took", time.Since(now).Round(time.Millisecond))
	r.swept.Add(1)
	r.freed.Add(st.Freed)
	if hook := r.cfg.CollectHook; hook != nil {
		hook(st, nil)
	}
	return false
}

// Collections counts the collections of the store this server ran, those
// that failed, and the bytes they deleted. nil (no store yet) has none.
func (r *Replicas) Collections() (ok, failed, freed int64) {
	if r == nil {
		return 0, 0, 0
	}
	return r.swept.Load(), r.sweepsFailed.Load(), r.freed.Load()
}

func (r *Replicas) collectFailed(err error) {
	r.sweepsFailed.Add(1)
	r.log.Warn("collect the snapshot store; tried again at the next collection", "error", err)
	if hook := r.cfg.CollectHook; hook != nil {
		hook(replica.SweepStats{}, err)
	}
}

// eachBinding calls fn with every binding of the metadata store, a page
// at a time.
func (r *Replicas) eachBinding(ctx context.Context, fn func(meta.Binding)) error {
	var after *meta.ThreadKey
	for {
		page, more, err := r.cfg.Store.ListBindingsPage(ctx, nil, after, bindingsPage)
		if err != nil {
			return fmt.Errorf("list the bindings: %w", err)
		}
		for _, b := range page {
			fn(b)
		}
		if !more || len(page) == 0 {
			return nil
		}
		last := page[len(page)-1].ThreadKey
		after = &last
	}
}

// sweepPending deletes the pending changes (pending.go) of the threads
// deleted: those no binding names, put a grace before start (one put
// since may be of a thread bound since the bindings were listed).
func (r *Replicas) sweepPending(ctx context.Context, start time.Time) error {
	var names []string
	err := r.eachBinding(ctx, func(b meta.Binding) { names = append(names, PendingName(b.ThreadKey)) })
	if err != nil {
		return err
	}
	n, err := replica.SweepPending(ctx, r.store, names, start.Add(-r.grace()))
	if n > 0 {
		r.log.Info("deleted the pending changes of deleted threads from the snapshot store", "threads", n)
	}
	return err
}

// liveTrees lists the trees every server's checkpoints reference: those
// of every checkpoint of every thread's history, of every tenant, and of
// the restores under way (the tree restored, and the one a failed
// restore puts back). The tenants are those of the bindings: a thread's
// binding is made before its history and deleted after it, so every
// history has one.
func (r *Replicas) liveTrees(ctx context.Context) ([]snapshot.Hash, error) {
	tenants := make(map[string]bool)
	err := r.eachBinding(ctx, func(b meta.Binding) { tenants[b.Tenant] = true })
	if err != nil {
		return nil, err
	}
	var trees []snapshot.Hash
	add := func(h meta.History, what, tree string) error {
		t, err := snapshot.ParseHash(tree)
		if err != nil {
			return fmt.Errorf("%s of %s: %w", what, call.KeyName(h.ThreadKey), err)
		}
		trees = append(trees, t)
		return nil
	}
	for tenant := range tenants {
		hs, err := r.cfg.Store.ListHistories(ctx, tenant)
		if err != nil {
			return nil, fmt.Errorf("list the histories of tenant %s: %w", call.Quote(tenant), err)
		}
		for _, h := range hs {
			for _, c := range h.Checkpoints {
				if err := add(h, "checkpoint "+c.ID, c.Tree); err != nil {
					return nil, err
				}
			}
			if rs := h.Restoring; rs != nil {
				if err := add(h, "the restore", rs.Tree); err != nil {
					return nil, err
				}
				if rs.From != "" {
					if err := add(h, "the restore", rs.From); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return trees, nil
}
