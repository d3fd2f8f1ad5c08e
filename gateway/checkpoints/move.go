package checkpoints

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// A thread that moves with its last checkpoint (serve --on-unreachable
// restore). Its former host is gone for good, and its folder with it, but
// the checkpoints that host copied to the snapshot store are there for
// any server: the server that takes the thread over restores the newest
// of them into a workspace of its own, before the thread's first command
// runs here. What the former host changed after it, and the checkpoints
// it took and never copied, are lost: they are dropped from the history
// (their trees are nowhere this server can reach), and the model is told
// (moved.Note).

// moved says what RestoreMoved did.
type moved struct {
	// Checkpoint is the checkpoint restored; "" when the thread has none
	// in the store, and starts afresh.
	Checkpoint string
	// Dropped are the checkpoints the former host took and never copied.
	Dropped []string
	// Changed are the paths the restore made.
	Changed []string
	// Note is what the model is told, once.
	Note string
}

// RestoreMoved restores, into b's workspace (new, or what a former try
// left), the newest checkpoint of b's thread that is in the snapshot
// store, and returns its id and the note the model is to be given; ""
// if the thread has none there (it then starts afresh). See restoreMoved.
func (c *Checkpoints) RestoreMoved(ctx context.Context, b meta.Binding, from string) (checkpoint, note string, err error) {
	m, err := c.restoreMoved(ctx, b, from)
	return m.Checkpoint, m.Note, err
}

// restoreMoved restores into b's workspace the newest checkpoint of b's
// thread that is in the snapshot store; b is the binding the thread is
// about to have here, from is the host it was on. The thread's lock is held (the takeover's bind): no
// checkpoint call of the thread runs meanwhile, since each binds first,
// and no command, since none runs before the bind. Without a store, or
// without a replicated checkpoint, it changes nothing and says so
// (moved.Checkpoint ""). An error leaves the workspace to be discarded:
// the bind fails, and the next call tries the move again.
func (c *Checkpoints) restoreMoved(ctx context.Context, b meta.Binding, from string) (moved, error) {
	k := b.ThreadKey
	if c.cfg.Replicas == nil {
		return moved{}, nil
	}
	hist, err := c.store.GetHistory(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return moved{}, nil
	}
	if err != nil {
		return moved{}, fmt.Errorf("move %s: read the history: %w", call.KeyName(k), err)
	}
	var to *meta.Checkpoint
	for i, cp := range hist.Checkpoints {
		if cp.Replicated && (to == nil || cp.Seq > to.Seq) {
			to = &hist.Checkpoints[i]
		}
	}
	if to == nil {
		return moved{}, nil
	}
	target := *to
	var out moved
	err = c.withRepo(ctx, k, b, func(h *history) error {
		h.History = hist
		// The former host's journal was about its own folder.
		h.Restoring = nil
		if err := c.need(ctx, h, target); err != nil {
			return err
		}
		if err := c.dropUncopied(ctx, h, &out); err != nil {
			return err
		}
		// The workspace is what it is here (empty, or what a move cut
		// short left): read whole, and made the checkpoint's.
		now, _, err := h.repo.Build(ctx, h.files.Folder(), snapshot.Hash{}, nil, true)
		if err != nil {
			return fmt.Errorf("move %s: read the new workspace: %w", call.KeyName(k), err)
		}
		h.Restoring = &meta.Restore{Op: "move", To: target.ID, Tree: target.Tree, Head: target.ID, HostID: c.cfg.HostID,
			StartedAt: time.Now().UTC(), From: now.String()}
		if err := c.putHistory(ctx, h); err != nil {
			h.Restoring = nil
			return err
		}
		rctx, done := c.restoreContext(ctx)
		defer done()
		changed, err := c.applyRestore(rctx, h, now)
		if err != nil {
			return err
		}
		out.Checkpoint, out.Changed = target.ID, changed
		return nil
	})
	if err != nil {
		return moved{}, err
	}
	from, here := cmp.Or(from, "unknown"), cmp.Or(c.cfg.HostID, "unknown")
	out.Note = fmt.Sprintf("The workspace moved from host %s to host %s at checkpoint %s; changes made after it on %s are not here.",
		from, here, out.Checkpoint, from)
	if len(out.Dropped) > 0 {
		out.Note += fmt.Sprintf(" Checkpoints %s were not copied before the move, and are gone.", strings.Join(out.Dropped, ", "))
	} else if lost := c.lostPaths(ctx, k, target, from); lost != "" {
		out.Note += " " + lost
	}
	c.log.Warn("thread moved with its last copied checkpoint", "tenant", k.Tenant, "thread", k.Thread, "from", from,
		"checkpoint", out.Checkpoint, "dropped", out.Dropped, "changed", len(out.Changed))
	return out, nil
}

// lostPaths says which paths the former host changed after checkpoint
// to, when it put them in the store after to was taken (replicas: every
// few seconds), "" when it did not. A record of before to (of the thread
// as it was when the host last looked, or of a thread of the same name
// since deleted) says nothing of what came after.
func (c *Checkpoints) lostPaths(ctx context.Context, k meta.ThreadKey, to meta.Checkpoint, from string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := c.cfg.Replicas.Pending(ctx, k)
	if err != nil {
		if !errors.Is(err, replica.ErrNotFound) {
			c.log.Warn("read what the former host changed after the checkpoint", "tenant", k.Tenant, "thread", k.Thread, "error", err)
		}
		return ""
	}
	if p.Base != to.ID || p.Host != from || p.At.Before(to.CreatedAt) {
		return ""
	}
	at := p.At.UTC().Format(time.RFC3339)
	switch {
	case !p.Complete:
		return fmt.Sprintf("%s lost track of which paths changed after it.", from)
	case len(p.Paths) == 0:
		return fmt.Sprintf("%s had changed nothing after it as of %s.", from, at)
	}
	more := ""
	if p.More > 0 {
		more = fmt.Sprintf(" and %d more", p.More)
	}
	return fmt.Sprintf("Paths changed there after it, as of %s: %s%s.", at, strings.Join(p.Paths, ", "), more)
}

// dropUncopied drops from h the checkpoints its former host never copied
// to the store (their trees were on its disk only), and from the redo
// stack with them; those counted against one are counted again, against
// trees this server brings from the store.
func (c *Checkpoints) dropUncopied(ctx context.Context, h *history, out *moved) error {
	cps := slices.Clone(h.Checkpoints)
	for i := 0; i < len(cps); {
		if cps[i].Replicated {
			i++
			continue
		}
		out.Dropped = append(out.Dropped, cps[i].ID)
		cps = dropCheckpoint(cps, i)
	}
	if len(out.Dropped) == 0 {
		return nil
	}
	for _, cp := range cps {
		if cp.OwnBytes != recount {
			continue
		}
		if err := c.need(ctx, h, cp); err != nil {
			return err
		}
		if base := h.find(cp.OwnBase); base != nil {
			if err := c.need(ctx, h, *base); err != nil {
				return err
			}
		}
	}
	if err := settle(ctx, h.repo, cps); err != nil {
		return fmt.Errorf("move %s: count the checkpoints kept: %w", call.KeyName(h.k), err)
	}
	h.Checkpoints = cps
	h.Redo = slices.DeleteFunc(slices.Clone(h.Redo), func(id string) bool { return slices.Contains(out.Dropped, id) })
	return nil
}

// withRepo runs fn with k's repository's shared lock and its workspace
// (b's root) open, as withHistoryLocked does, but with an empty history
// for fn to fill: nothing of a journal is finished first.
func (c *Checkpoints) withRepo(ctx context.Context, k meta.ThreadKey, b meta.Binding, fn func(h *history) error) error {
	return c.withShared(ctx, k, func(repo *snapshot.Repo) error {
		files, err := c.openFiles(k, b)
		if err != nil {
			return err
		}
		defer files.Close()
		return fn(&history{k: k, b: b, repo: repo, files: files})
	})
}
