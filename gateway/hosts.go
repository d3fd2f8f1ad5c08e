package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/jobs"
	"warren/gateway/lease"
	"warren/jail"
	"warren/meta"
)

// Threads and hosts. A gateway with a host id keeps a lease in the store
// (a lease.Session: heartbeats every Config.RenewEvery; the lease lapses
// after Config.ExpiresAfter without one) and pins every thread it serves:
// the pin lasts as long as the lease, and while it lasts every other
// gateway refuses the thread. When a host dies its lease lapses, its pins
// go with it, and the next gateway that gets a call for one of its threads
// pins it and takes it over: it resumes in the same folder if it can reach
// it, else starts a fresh workspace or marks the thread gone, as
// configured.
//
// Fencing: a gateway never serves a pinned thread beyond what its lease
// covers (package lease counts the lease valid a margin short of the
// store's view of it), and once a lease ended the session calls fence,
// which takes down every thread served under it. A thread another host
// may take over is therefore never served by two.
//
// The check a call pays is a map look-up and a clock read (Session.Holds):
// a pin made under the current lease holds until the lease lapses, so it
// is not read again from the store.

// Defaults of the lease.
const (
	DefaultRenewEvery   = 10 * time.Second
	DefaultExpiresAfter = 30 * time.Second
)

// What a gateway does with a thread it takes over whose folder it cannot
// reach (Config.OnUnreachable).
const (
	UnreachableGone  = "gone"
	UnreachableFresh = "fresh"
)

// startLease takes the host's lease, before anything is served: a gateway
// that cannot hold its host id serves nothing pinned. ctx bounds the first
// heartbeat only. Without a host id there is no lease (g.lease stays nil).
func (g *Gateway) startLease(ctx context.Context) error {
	if g.cfg.HostID == "" {
		return nil
	}
	s, err := lease.Start(ctx, g.store, lease.Config{
		HostID:       g.cfg.HostID,
		RenewEvery:   g.cfg.RenewEvery,
		ExpiresAfter: g.cfg.ExpiresAfter,
		Fence:        g.fence,
		Logger:       g.log,
	})
	if err != nil {
		return err
	}
	g.lease = s
	return nil
}

// endLease stops the heartbeats and waits for a fence under way, so that
// no fence runs behind unmountAll, nor once the caller closes the store.
// The lease is not revoked: it runs out, and a restart of this host in
// time takes its pins over without a gap.
func (g *Gateway) endLease() {
	if g.lease != nil {
		g.lease.Close()
	}
}

// fence is the lease session's fence: once the lease old ended, another
// host may take any thread pinned under it, and nothing of this gateway
// may go on writing in their folders. It takes down every thread this
// gateway serves that is not pinned under the lease now in force, with
// its jail, its commands and jobs and its mount: those pinned under old,
// and any other mount (there should be none). A thread that a call pinned
// again under the new lease is spared: claim pins under the thread's lock,
// and takeDown checks under it. Records stay: once this gateway holds a
// lease again, a call pins a thread again (if nobody took it) and mounts
// it again. ctx ends when the gateway closes, whose unmountAll takes down
// the rest. It asks s, not g.lease: it may run before startLease set it.
func (g *Gateway) fence(ctx context.Context, s *lease.Session, old meta.LeaseID, pinned []meta.ThreadKey) {
	keys := slices.Clone(pinned)
	listed := make(map[meta.ThreadKey]bool, len(pinned))
	for _, k := range pinned {
		listed[k] = true
	}
	// A jail or a job runs only in a mounted thread: the mounts are all.
	for _, k := range g.threads.mountedKeys() {
		if !listed[k] {
			keys = append(keys, k)
		}
	}
	down := 0
	for _, k := range keys {
		if ctx.Err() != nil {
			break
		}
		took, err := g.takeDown(ctx, k, func(context.Context) bool {
			_, held := s.Holds(k)
			return !held && g.mounted(k)
		})
		if err != nil {
			g.log.Error("fence: take down a thread", "tenant", k.Tenant, "thread", k.Thread, "error", err)
			continue
		}
		if took {
			down++
			g.emit(api.Event{Type: api.EventThreadFenced, Tenant: k.Tenant, Thread: k.Thread,
				Message: "This server's lease on the metadata store ended: it took the thread down, as another host may take it now."})
		}
	}
	g.metrics.Fenced(down)
	if down > 0 {
		g.log.Warn("fenced: took down the threads this host may no longer own", "host_id", g.cfg.HostID, "lease", old, "threads", down)
	}
}

// claim makes sure this gateway may serve thread k: nil if it holds k's
// pin (pinning k now if nobody else holds it), ErrPinned naming the owner,
// or ErrFenced while its own lease is not valid. b is k's binding, if it
// has one, for the owner's folder in the refusal. A gateway without a host
// id pins nothing; it refuses only threads another host holds a live pin
// on.
func (g *Gateway) claim(ctx context.Context, k meta.ThreadKey, b *meta.Binding) error {
	if g.cfg.HostID == "" {
		if b == nil || b.HostID == "" {
			return nil
		}
		p, err := g.store.GetPin(ctx, k)
		if errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the pin of %s: %w", call.KeyName(k), err)
		}
		return g.pinnedError(ctx, k, b, p.HostID)
	}
	id, held := g.lease.Holds(k)
	if id == 0 {
		g.log.Warn("refused: no valid lease", "tenant", k.Tenant, "thread", k.Thread, "host_id", g.cfg.HostID)
		return errFenced
	}
	if held {
		return nil
	}
	p, err := g.lease.Pin(ctx, k)
	switch {
	case errors.Is(err, meta.ErrPinned):
		return g.pinnedError(ctx, k, b, p.HostID)
	case errors.Is(err, meta.ErrLeaseLost):
		return errFenced
	case err != nil:
		return fmt.Errorf("pin %s: %w", call.KeyName(k), err)
	}
	return nil
}

// errFenced refuses a call while this gateway's lease is not valid.
var errFenced error = call.Refuse(api.ErrFenced, "This server's lease on the metadata store lapsed: it serves no pinned thread until it renews it.")

// pinnedError is the refusal of a thread that host owns.
func (g *Gateway) pinnedError(ctx context.Context, k meta.ThreadKey, b *meta.Binding, host string) error {
	if b == nil {
		if cur, err := g.store.GetBinding(ctx, k); err == nil {
			b = &cur
		}
	}
	root := "(not recorded)"
	if b != nil && b.HostID == host {
		root = b.Root
	}
	g.log.Warn("refused: thread pinned to another host", "tenant", k.Tenant, "thread", k.Thread, "path", root, "owner", host)
	return call.Refuse(api.ErrPinned, fmt.Sprintf("The workspace of this thread is %s on the host %s. Only that host can continue the thread.", root, host))
}

// goneError is the refusal of a thread whose folder is lost.
func goneError(b meta.Binding) error {
	return call.Refuse(api.ErrGone, fmt.Sprintf("The workspace of this thread, %s on the host %s, is gone, so the tools cannot work on it.",
		b.Root, call.HostName(b.HostID)))

}

// takeOver takes a thread another host served: the caller holds its pin
// now. It returns the root to serve, or the binding marked gone. It notes
// what became of the jobs the former host ran. The thread lock of k must
// be held.
func (g *Gateway) takeOver(ctx context.Context, old meta.Binding) (root string, fresh bool, err error) {
	k := old.ThreadKey
	g.log.Info("taking over thread", "tenant", k.Tenant, "thread", k.Thread, "from", old.HostID, "root", old.Root)
	g.noteMovedJobs(ctx, k)
	if old.State == meta.StateGone {
		return "", false, goneError(old)
	}
	if fi, err := os.Stat(old.Root); err == nil && fi.IsDir() {
		r, err := g.rootOf(old)
		if err == nil && r == filepath.Clean(old.Root) {
			return r, false, nil
		}
	}
	if g.cfg.OnUnreachable == UnreachableFresh {
		root, _, err := g.threadPaths(k)
		g.log.Warn("workspace not reachable: starting a fresh one", "tenant", k.Tenant, "thread", k.Thread, "old_root", old.Root, "old_host", old.HostID, "root", root)
		return root, true, err
	}
	gone := old
	gone.State = meta.StateGone
	if _, err := g.store.UpdateBinding(ctx, gone); err != nil {
		return "", false, fmt.Errorf("mark %s gone: %w", call.KeyName(k), err)
	}
	err = goneError(old)
	g.log.Warn("thread stranded: its workspace is not reachable", "tenant", k.Tenant, "thread", k.Thread, "root", old.Root, "host", old.HostID)
	g.emit(api.Event{Type: api.EventThreadStranded, Tenant: k.Tenant, Thread: k.Thread, Message: err.Error()})
	return "", false, err
}

// noteMovedJobs notes, once each, the jobs another host left running on a
// thread this gateway takes over. Jobs do not move. One that ran on this
// machine is stopped here (its cgroup is on this machine); one elsewhere
// may still run, and this gateway cannot stop it.
func (g *Gateway) noteMovedJobs(ctx context.Context, k meta.ThreadKey) {
	g.jobs.NoteLeft(ctx, k, "job of a former host noted", nil, func(rec meta.Job) (string, bool) {
		if rec.HostID == g.cfg.HostID {
			return "", false
		}
		id := jobs.ID(rec.Seq)
		if rec.Machine != "" && rec.Machine == g.machine && rec.Cgroup != "" {
			err := jail.StopTree(rec.Cgroup)
			if err == nil {
				return fmt.Sprintf("Background job %s was stopped: it ran on a host before the session moved to this one.", id), true
			}
			g.log.Warn("stop a job of a former host", "tenant", k.Tenant, "thread", k.Thread, "job", id, "error", err)
		}
		return fmt.Sprintf("Background job %s may still run: it ran on a host before this one, and this host cannot stop it.", id), true
	})
}

// unpin moves a thread to this gateway at once, if the host that holds
// it is no longer alive; while it lives, the call is refused.
func (g *Gateway) unpin(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	if g.cfg.HostID == "" {
		return api.ThreadInfo{}, fmt.Errorf("%w: this server has no host id, so it pins nothing and cannot take a thread over", api.ErrInvalid)
	}
	p, err := g.store.GetPin(ctx, k)
	switch {
	case err == nil && p.HostID != g.cfg.HostID:
		return api.ThreadInfo{}, call.Refuse(api.ErrPinned, fmt.Sprintf("The thread is pinned to the live host %s; it can move only once that host's lease expires.", p.HostID))
	case err != nil && !errors.Is(err, meta.ErrNotFound):
		return api.ThreadInfo{}, fmt.Errorf("unpin %s: %w", call.KeyName(k), err)
	}
	return g.bind(ctx, tenant, thread)
}

// listHosts lists the hosts the store knows.
func (g *Gateway) listHosts(ctx context.Context) ([]meta.Host, error) {
	hs, err := g.store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return hs, nil
}

// machineID names the machine, so a gateway can tell the jobs it could
// stop (their cgroups are on this machine) from those of other machines.
func machineID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return id
			}
		}
	}
	host, _ := os.Hostname()
	return "host:" + host
}
