package threads

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/hosts"
	"warren/gateway/lease"
	"warren/meta"
)

// Threads and hosts. The host's lease and the threads' pins are package
// hosts'. When a host dies its lease lapses, its pins go with it, and the
// next daemon that gets a call for one of its threads pins it and takes
// it over (takeOver): it resumes in the same folder if it can reach it,
// else starts a fresh workspace or marks the thread gone, as configured.
// Once this host's lease ended, the session calls Fence, which takes down
// every thread served under it: a thread another host may take over is
// never served by two.

// Fence is the lease session's fence (hosts.Config.Fence): once the lease old ended, another
// host may take any thread pinned under it, and nothing of this gateway
// may go on writing in their folders. It takes down every thread this
// gateway serves that is not pinned under the lease now in force, with
// its jail, its commands and jobs and its mount: those pinned under old,
// and any other mount (there should be none). A thread that a call pinned
// again under the new lease is spared: claim pins under the thread's lock,
// and takeDown checks under it. Records stay: once this gateway holds a
// lease again, a call pins a thread again (if nobody took it) and mounts
// it again. ctx ends when the gateway closes, whose unmountAll takes down
// the rest. It asks s, not t.deps.Hosts: it may run before Start set it.
func (t *Threads) Fence(ctx context.Context, s *lease.Session, old meta.LeaseID, pinned []meta.ThreadKey) {
	keys := slices.Clone(pinned)
	listed := make(map[meta.ThreadKey]bool, len(pinned))
	for _, k := range pinned {
		listed[k] = true
	}
	// A jail or a job runs only in a mounted thread: the mounts are all.
	for _, k := range t.set.mountedKeys() {
		if !listed[k] {
			keys = append(keys, k)
		}
	}
	down := 0
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		took, err := t.TakeDown(ctx, k, func(context.Context) bool {
			_, held := s.Holds(k)
			return !held && t.Mounted(k)
		})
		if err != nil {
			t.log.Error("fence: take down a thread", "tenant", k.Tenant, "thread", k.Thread, "error", err)
			continue
		}
		if took {
			down++
			t.cfg.Events.Emit(api.Event{Type: api.EventThreadFenced, Tenant: k.Tenant, Thread: k.Thread,
				Message: "This server's lease on the metadata store ended: it took the thread down, as another host may take it now."})
		}
	}
	t.cfg.Metrics.Fenced(down)
	if down > 0 {
		t.log.Warn("fenced: took down the threads this host may no longer own", "host_id", t.cfg.HostID, "lease", old, "threads", down)
	}
}

// takeOver takes a thread another host served: the caller holds its pin
// now. It returns the root to serve, or the binding marked gone. It notes
// what became of the jobs the former host ran. The thread lock of k must
// be held.
func (t *Threads) takeOver(ctx context.Context, old meta.Binding) (root string, fresh bool, err error) {
	k := old.ThreadKey
	t.log.Info("taking over thread", "tenant", k.Tenant, "thread", k.Thread, "from", old.HostID, "root", old.Root)
	t.deps.Jobs.NoteMoved(ctx, k)
	if old.State == meta.StateGone {
		return "", false, hosts.GoneError(old)
	}
	if fi, err := os.Stat(old.Root); err == nil && fi.IsDir() {
		r, err := t.RootOf(old)
		if err == nil && r == filepath.Clean(old.Root) {
			return r, false, nil
		}
	}
	switch t.cfg.OnUnreachable {
	case UnreachableFresh:
		root, _, err := t.Paths(k)
		t.log.Warn("workspace not reachable: starting a fresh one", "tenant", k.Tenant, "thread", k.Thread, "old_root", old.Root, "old_host", old.HostID, "root", root)
		return root, true, err
	case UnreachableRestore:
		// A new workspace here, which the bind fills with the thread's
		// last copied checkpoint once it is mounted (or leaves fresh).
		root, _, err := t.Paths(k)
		t.log.Warn("workspace not reachable: restoring its last copied checkpoint", "tenant", k.Tenant, "thread", k.Thread, "old_root", old.Root, "old_host", old.HostID, "root", root)
		return root, true, err
	}
	gone := old
	gone.State = meta.StateGone
	if _, err := t.store.UpdateBinding(ctx, gone); err != nil {
		return "", false, fmt.Errorf("mark %s gone: %w", call.KeyName(k), err)
	}
	err = hosts.GoneError(old)
	t.log.Warn("thread stranded: its workspace is not reachable", "tenant", k.Tenant, "thread", k.Thread, "root", old.Root, "host", old.HostID)
	t.cfg.Events.Emit(api.Event{Type: api.EventThreadStranded, Tenant: k.Tenant, Thread: k.Thread, Message: err.Error()})
	return "", false, err
}
