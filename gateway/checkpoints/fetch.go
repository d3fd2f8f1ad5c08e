package checkpoints

import (
	"context"
	"errors"
	"fmt"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// Trees from the snapshot store. With a store (Config.Replicas), the
// repository on this server's disk is a cache of the checkpoints: a
// thread that moved here from another server (or whose checkpoints
// another server took, both reading one metadata store) has its history
// here, but the trees of its checkpoints are in the store only. Each call
// that reads a checkpoint's tree first makes the repository hold it
// whole (need), fetching what it lacks, and fails before anything
// changes when it cannot: a restore is journaled only once its target is
// here.

// need makes h's repository hold the whole tree of checkpoint cp, from
// the store if need be. Without a store it does nothing: the tree is in
// the repository, or the repository's own error says it is not.
func (c *Checkpoints) need(ctx context.Context, h *history, cp meta.Checkpoint) error {
	t, err := snapshot.ParseHash(cp.Tree)
	if err != nil {
		return fmt.Errorf("checkpoint %s of %s: %w", cp.ID, call.KeyName(h.k), err)
	}
	return c.needTree(ctx, h, cp.ID, cp.HostID, cp.Replicated, t)
}

// needTree is need for a tree that a checkpoint id holds (or a restore's
// journal, id then naming what it is), recorded by host and copied to
// the store or not (replicated).
func (c *Checkpoints) needTree(ctx context.Context, h *history, id, host string, replicated bool, t snapshot.Hash) error {
	r := c.cfg.Replicas
	if r == nil || r.Whole(h.k.Tenant, h.repo, t) {
		return nil
	}
	_, err := r.Fetch(ctx, h.k.Tenant, h.repo, t)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, replica.ErrNotFound) && !replicated:
		where := "another host"
		if host != "" {
			where = "host " + host
		}
		return call.Refuse(api.ErrConflict, fmt.Sprintf("Checkpoint %s is not on this server, nor in the snapshot store: it was taken on %s and not copied to the store before the thread moved.", id, where))
	case errors.Is(err, replica.ErrNotFound):
		return call.Refuse(api.ErrConflict, fmt.Sprintf("Checkpoint %s is not on this server, and the snapshot store has lost it: %v", id, err))
	case errors.Is(err, replica.ErrCorrupt):
		c.log.Error("the snapshot store's copy of a checkpoint fails its checks", "tenant", h.k.Tenant, "thread", h.k.Thread, "checkpoint", id, "error", err)
		return fmt.Errorf("checkpoint %s of %s: the snapshot store's copy fails its checks, and nothing of it was kept: %w", id, call.KeyName(h.k), err)
	}
	return call.Refuse(api.ErrUnavailable, fmt.Sprintf("The snapshot store is unreachable, and checkpoint %s is not on this server: %v", id, err))
}

// needAll makes h's repository hold the trees of every checkpoint of h
// that the store holds (replicated): a new checkpoint may count its
// bytes against any of them (settle). It stops at the first it cannot
// bring.
func (c *Checkpoints) needAll(ctx context.Context, h *history) error {
	if c.cfg.Replicas == nil {
		return nil
	}
	for _, cp := range h.Checkpoints {
		if cp.Replicated {
			if err := c.need(ctx, h, cp); err != nil {
				return err
			}
		}
	}
	return nil
}
