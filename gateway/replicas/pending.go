package replicas

import (
	"context"
	"time"

	"warren/fs"
	"warren/meta"
	"warren/snapshot/replica"
)

// What a move would lose. Every PendingEvery, the room puts in the store,
// for each thread this host serves whose workspace changed since it last
// looked, the paths changed since the thread's last checkpoint
// (replica.Pending). When this host dies and another server restores the
// thread's last copied checkpoint, the note it gives the model lists
// those paths if they were put after that checkpoint: what was lost is
// at most PendingEvery of changes behind. A thread that does not change
// costs nothing (fs.Hub.PendingChanges answers from a counter); one that
// does, one PUT per period.

// DefaultPendingEvery is how often the changes since the last checkpoint
// go to the store.
const DefaultPendingEvery = 10 * time.Second

// Served is a thread this host serves, and its workspace folder.
type Served struct {
	Key  meta.ThreadKey
	Root string
}

// PendingName is the name of k's replica.Pending.
func PendingName(k meta.ThreadKey) string { return k.Tenant + "\x00" + k.Thread }

// reportPending puts the threads' pending changes in the store every
// PendingEvery until the room closes.
func (r *Replicas) reportPending() {
	defer close(r.reported)
	every := cmp0(r.cfg.PendingEvery, DefaultPendingEvery)
	seen := make(map[meta.ThreadKey]uint64) // the count of each set put
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-r.ctx.Done():
			return
		}
		served := r.cfg.Served()
		live := make(map[meta.ThreadKey]bool, len(served))
		for _, s := range served {
			live[s.Key] = true
			cs, gen, ok := r.cfg.Pending(s.Root, seen[s.Key])
			if !ok {
				continue
			}
			if err := r.putPending(r.ctx, s.Key, cs); err != nil {
				if r.ctx.Err() != nil {
					return
				}
				r.log.Debug("put the changes since the last checkpoint in the snapshot store", "tenant", s.Key.Tenant, "thread", s.Key.Thread, "error", err)
				continue
			}
			seen[s.Key] = gen
		}
		for k := range seen {
			if !live[k] {
				delete(seen, k)
			}
		}
	}
}

func (r *Replicas) putPending(ctx context.Context, k meta.ThreadKey, cs fs.ChangeSet) error {
	p := replica.Pending{Name: PendingName(k), Host: r.cfg.HostID, At: time.Now().UTC(), Base: cs.Base, Complete: cs.Complete}
	if cs.Complete {
		for _, c := range cs.Changes {
			if c.Path == "" {
				continue // the workspace's own folder
			}
			p.Paths = append(p.Paths, c.Path)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cmp0(r.cfg.PendingEvery, DefaultPendingEvery))
	defer cancel()
	return replica.PutPending(ctx, r.store, p)
}

// Pending returns what k's former host put of the changes it had since
// its last checkpoint (replica.GetPending).
func (r *Replicas) Pending(ctx context.Context, k meta.ThreadKey) (replica.Pending, error) {
	return replica.GetPending(ctx, r.store, PendingName(k))
}
