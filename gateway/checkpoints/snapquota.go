package checkpoints

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
)

// Snapshot quotas (docs/operations.md, "Checkpoints and the snapshot
// quota"). A thread's snapshot bytes are the bytes its kept checkpoints
// reference, whatever other threads reference too: a thread holding what
// another holds counts it in full, as btrfs counts a subvolume's
// "referenced" bytes, so two threads with one content cannot share one
// quota's worth between them.
//
// Within one thread an object its checkpoints share is counted once: the
// union of what they reference, as btrfs counts the "referenced" bytes of
// a quota group that holds all of a thread's snapshots. Counting each
// checkpoint's whole tree instead (each snapshot's own "referenced") would
// make a thread with a 40 MiB workspace and a 64 MiB quota unable to keep
// two checkpoints of it, however little changed between them; the union
// bounds what the thread's history costs the disk, which is what the
// quota is for, and a thread that rewrites 50 MiB a turn still holds 50
// MiB more per kept checkpoint.
//
// Bytes are data bytes (snapshot.Repo.DataBytes): a sparse file counts
// its data, never its holes, as btrfs counts a sparse file's extents.
//
// The union is kept cheap: each checkpoint records OwnBytes, the bytes of
// its tree that its base (meta.Checkpoint.OwnBase, its parent when it was
// taken) does not hold at the same path with the same content, found by
// a diff of the two trees (which skips every shared subtree), so a
// thread's total is a sum over its kept checkpoints. Every byte a kept
// checkpoint references is in its own bytes or, by induction, in its
// base's chain, all kept: the sum is never below the union (content that
// moves to another path, or comes back, is counted again: the error is on
// the safe side). When a checkpoint is dropped, each checkpoint based on
// it is counted again against the dropped one's base, or, if it had none,
// as its whole tree, RefBytes, which each checkpoint records (its base's
// and the difference) so that this costs no walk.

// SnapshotQuota is the snapshot quota of a thread with settings s: its
// own, else the server's, else its disk quota; 0 is none.
func (c *Checkpoints) SnapshotQuota(s meta.Settings) int64 {
	return cmp.Or(s.SnapshotBytes, c.cfg.SnapshotQuotaBytes, c.cfg.Quotas.DiskBytes(s))
}

// SnapshotBytes is what the checkpoints cps hold: their own bytes; a
// checkpoint not counted yet (a record from before snapshot quotas)
// counts its whole tree's apparent size (Bytes, which is never below its
// data).
func SnapshotBytes(cps []meta.Checkpoint) int64 {
	var n int64
	for _, c := range cps {
		if c.Counted {
			n += c.OwnBytes
		} else {
			n += c.Bytes
		}
	}
	return n
}

// diffBytes compares tree with base: own is the data bytes (DataBytes)
// of the files and links of tree that base does not hold at the same path
// with the same content, net what tree references less what base does.
// A zero base is the empty tree: own and net are then all of tree's.
func diffBytes(ctx context.Context, r *snapshot.Repo, base, tree snapshot.Hash) (own, net int64, err error) {
	ds, err := r.Diff(ctx, base, tree)
	if err != nil {
		return 0, 0, err
	}
	for _, d := range ds {
		if d.Op == snapshot.Modified && d.Old.Hash == d.New.Hash {
			continue // a mode changed
		}
		// A sparse file's map that cannot be read (a corrupt object)
		// counts high, never low, and fails no checkpoint: its size for
		// what is added, nothing for what goes.
		if d.Op != snapshot.Added && d.Old.Kind != snapshot.KindDir {
			if n, err := r.DataBytes(d.Old); err == nil {
				net -= n
			}
		}
		if d.Op != snapshot.Removed && d.New.Kind != snapshot.KindDir {
			n, err := r.DataBytes(d.New)
			if err != nil {
				n = d.New.Size
			}
			own += n
			net += n
		}
	}
	return own, net, nil
}

// recount marks a checkpoint's OwnBytes as to be counted again (settle)
// against its OwnBase: never stored, since settle runs before a history
// is.
const recount = -1

// settle counts the own bytes of each checkpoint of cps that is not
// counted, whose count was undone by a drop, or whose base is not in cps:
// against its recorded base or its parent, whichever cps holds, else in
// full (RefBytes). A checkpoint not counted yet gets its RefBytes too:
// its base's and the difference, or a walk of its tree where it has no
// counted base (once per checkpoint recorded before snapshot quotas).
func settle(ctx context.Context, r *snapshot.Repo, cps []meta.Checkpoint) error {
	at := make(map[string]int, len(cps))
	for i, c := range cps {
		at[c.ID] = i
	}
	// Oldest first: a base is counted before what is counted against it.
	for i := range cps {
		c := &cps[i]
		if _, ok := at[c.OwnBase]; c.Counted && c.OwnBytes != recount && (c.OwnBase == "" || ok) {
			continue
		}
		var base *meta.Checkpoint
		for _, id := range []string{c.OwnBase, c.Parent} {
			// A base is older than what it is the base of, so the
			// bases never form a loop.
			if j, ok := at[id]; ok && id != "" && cps[j].Seq < c.Seq && cps[j].Counted {
				base = &cps[j]
				break
			}
		}
		t, err := snapshot.ParseHash(c.Tree)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", c.ID, err)
		}
		if base == nil {
			if !c.Counted {
				if _, c.RefBytes, err = diffBytes(ctx, r, snapshot.Hash{}, t); err != nil {
					return fmt.Errorf("count the bytes of checkpoint %s: %w", c.ID, err)
				}
			}
			c.OwnBytes, c.OwnBase, c.Counted = c.RefBytes, "", true
			continue
		}
		bt, err := snapshot.ParseHash(base.Tree)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", base.ID, err)
		}
		own, net, err := diffBytes(ctx, r, bt, t)
		if err != nil {
			return fmt.Errorf("count the bytes of checkpoint %s: %w", c.ID, err)
		}
		if !c.Counted {
			c.RefBytes = max(base.RefBytes+net, 0)
		}
		c.OwnBytes, c.OwnBase, c.Counted = own, base.ID, true
	}
	return nil
}

// dropCheckpoint removes cps[i]; the checkpoints based on it are to be
// counted again (settle) against its own base.
func dropCheckpoint(cps []meta.Checkpoint, i int) []meta.Checkpoint {
	gone := cps[i]
	out := slices.Delete(slices.Clone(cps), i, i+1)
	for j := range out {
		if out[j].OwnBase == gone.ID {
			out[j].OwnBase, out[j].OwnBytes = gone.OwnBase, recount
		}
	}
	return out
}

// pinnedOf are the checkpoints of h that no retention drops whatever
// their age: the head, its parent (an undo that saved the workspace in a
// new head goes back to it), the redo stack and a restore's target.
func pinnedOf(h *history) map[string]bool {
	pinned := map[string]bool{h.Head: true}
	if head := h.find(h.Head); head != nil && head.Parent != "" {
		pinned[head.Parent] = true
	}
	for _, id := range h.Redo {
		pinned[id] = true
	}
	if h.Restoring != nil {
		pinned[h.Restoring.To] = true
	}
	return pinned
}

// fitSnapshotQuota counts h's checkpoints, cp the new one among them,
// and, while they hold more than the thread's snapshot quota or the
// tenant's, drops the oldest that may go. If they still do not fit once
// none may go, h's checkpoints are left as they were and the answer is a
// quota error that says what the thread holds, its limit and what to
// free; kept is what the thread held before cp. It says whether it
// dropped any. others is what the tenant's other threads hold, for the
// tenant's quota.
func (c *Checkpoints) fitSnapshotQuota(ctx context.Context, h *history, cp meta.Checkpoint, kept []meta.Checkpoint, others int64) (bool, error) {
	if err := settle(ctx, h.repo, h.Checkpoints); err != nil {
		return false, fmt.Errorf("checkpoint of %s: %w", call.KeyName(h.k), err)
	}
	limit, tenantLimit := c.SnapshotQuota(h.b.Settings), c.cfg.TenantSnapshotQuotaBytes
	fits := func(cps []meta.Checkpoint) bool {
		n := SnapshotBytes(cps)
		return (limit == 0 || n <= limit) && (tenantLimit == 0 || others+n <= tenantLimit)
	}
	cps := h.Checkpoints
	pinned := pinnedOf(h)
	dropped := false
	for !fits(cps) {
		i := slices.IndexFunc(cps, func(c meta.Checkpoint) bool { return !pinned[c.ID] })
		if i < 0 {
			return false, c.quotaRefusal(h, cp, kept, cps, limit, tenantLimit, others)
		}
		cps = dropCheckpoint(cps, i)
		if err := settle(ctx, h.repo, cps); err != nil {
			return false, fmt.Errorf("checkpoint of %s: %w", call.KeyName(h.k), err)
		}
		dropped = true
	}
	h.Checkpoints = cps
	return dropped, nil
}

// quotaRefusal is the error of a checkpoint cp that does not fit even
// with every droppable checkpoint gone (least, what is left then).
func (c *Checkpoints) quotaRefusal(h *history, cp meta.Checkpoint, kept, least []meta.Checkpoint, limit, tenantLimit, others int64) error {
	own := cp.OwnBytes
	if i := slices.IndexFunc(least, func(c meta.Checkpoint) bool { return c.ID == cp.ID }); i >= 0 {
		own = least[i].OwnBytes
	}
	holds, need := SnapshotBytes(kept), SnapshotBytes(least)
	var over string
	if limit > 0 && need > limit {
		over = fmt.Sprintf("the thread's checkpoints hold %d bytes of its snapshot quota of %d; this checkpoint adds %d (what changed since the head), and with every checkpoint that may be dropped gone they would still hold %d, %d past the quota",
			holds, limit, own, need, need-limit)
	} else {
		over = fmt.Sprintf("the tenant's threads hold %d bytes of checkpoints (this thread %d) of the tenant's snapshot quota of %d; this checkpoint adds %d, and with every checkpoint of this thread that may be dropped gone they would still hold %d, %d past the quota",
			others+holds, holds, tenantLimit, own, others+need, others+need-tenantLimit)
	}
	what := "The checkpoint was refused"
	if cp.Auto {
		what = fmt.Sprintf("The automatic checkpoint %s that keeps the workspace's state was refused, so nothing was restored or changed", call.Quote(cp.Label))
	}
	return call.Refuse(api.ErrQuota, fmt.Sprintf("%s: %s. Nothing already kept was dropped. To free room, remove or shrink large files of the workspace that changed, or revert to an older checkpoint (which empties the redo stack: the head, its parent and the redo stack are kept whatever their size); or raise the snapshot quota (warren bind --snapshot-quota BYTES, or the server's --snapshot-quota and --tenant-snapshot-quota).",
		what, over))

}

// tenantSnapshotBytes is what the checkpoints of tenant's threads other
// than k hold.
func (c *Checkpoints) tenantSnapshotBytes(ctx context.Context, k meta.ThreadKey) (int64, error) {
	hs, err := c.store.ListHistories(ctx, k.Tenant)
	if err != nil {
		return 0, fmt.Errorf("snapshot bytes of tenant %s: %w", call.Quote(k.Tenant), err)
	}
	var n int64
	for _, h := range hs {
		if h.ThreadKey != k {
			n += SnapshotBytes(h.Checkpoints)
		}
	}
	return n, nil
}

// forkQuota refuses a fork into the new thread nk whose first checkpoint
// cp (the whole tree, counted for the new thread) passes the new thread's
// snapshot quota (its settings are the defaults) or the tenant's. It
// returns what ends the hold on the tenant's quota, for the caller to
// call once the new thread's history is stored.
func (c *Checkpoints) forkQuota(ctx context.Context, nk meta.ThreadKey, cp meta.Checkpoint) (func(), error) {
	if limit := c.SnapshotQuota(meta.Settings{}); limit > 0 && cp.OwnBytes > limit {
		return nil, call.Refuse(api.ErrQuota, fmt.Sprintf("The fork was refused: its first checkpoint holds %d bytes, which the new thread counts in full, past the snapshot quota of %d a new thread gets. Nothing was made. Fork from a smaller checkpoint, or raise the server's --snapshot-quota.",
			cp.OwnBytes, limit))

	}
	tenantLimit := c.cfg.TenantSnapshotQuotaBytes
	if tenantLimit == 0 {
		return func() {}, nil
	}
	unlock, err := c.tenantQuota.Lock(ctx, nk.Tenant)
	if err != nil {
		return nil, fmt.Errorf("fork into %s: %w", call.KeyName(nk), err)
	}
	others, err := c.tenantSnapshotBytes(ctx, nk)
	if err != nil {
		unlock()
		return nil, err
	}
	if others+cp.OwnBytes > tenantLimit {
		unlock()
		return nil, call.Refuse(api.ErrQuota, fmt.Sprintf("The fork was refused: the tenant's threads hold %d bytes of checkpoints of the tenant's snapshot quota of %d, and the new thread would hold %d more (a fork counts its whole tree). Nothing was made. Free room in the tenant's threads (delete threads, or checkpoints' content), or raise --tenant-snapshot-quota.",
			others, tenantLimit, cp.OwnBytes))

	}
	return unlock, nil
}
