package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"warren/jail"
	"warren/meta"
)

// Threads and hosts. A gateway with a host id keeps a lease in the store
// by heartbeats (every Config.RenewEvery; it lapses after
// Config.ExpiresAfter without one) and pins every thread it serves: the
// pin lasts as long as the lease, and while it lasts every other gateway
// refuses the thread. When a host dies its lease lapses, its pins go with
// it, and the next gateway that gets a call for one of its threads pins
// it and takes it over: it resumes in the same folder if it can reach it,
// else starts a fresh workspace or marks the thread gone, as configured.
//
// Fencing: a gateway never serves a pinned thread beyond what its lease
// covers. It counts its lease as valid until the time it sent its last
// successful heartbeat plus the lease's length, minus a margin: the store
// renews the lease when it receives the heartbeat, later than it was
// sent, so the store's lease never ends before this gateway's view of it.
// A thread another host may take over is therefore never served by two.
//
// The check a call pays is a map look-up and a clock read: a pin made
// under the current lease holds until the lease lapses, so it is not read
// again from the store.

// Defaults of the lease.
const (
	DefaultRenewEvery   = 10 * time.Second
	DefaultExpiresAfter = 30 * time.Second
	// leaseMargin is taken off the lease's length, for clock rates and
	// the time between reading the clock and sending the heartbeat.
	leaseMargin = 500 * time.Millisecond
)

// What a gateway does with a thread it takes over whose folder it cannot
// reach (Config.OnUnreachable).
const (
	UnreachableGone  = "gone"
	UnreachableFresh = "fresh"
)

// lease is this gateway's hold on its host id.
type lease struct {
	mu         sync.Mutex
	id         meta.LeaseID // 0 while it has none
	validUntil time.Time    // by this gateway's monotonic clock
	pins       map[meta.ThreadKey]meta.LeaseID
}

// valid returns the lease in force now, or 0.
func (l *lease) valid(now time.Time) meta.LeaseID {
	id, _ := l.holds(now, meta.ThreadKey{})
	return id
}

// holds returns the lease in force now (0 if none), and whether k is
// pinned under it.
func (l *lease) holds(now time.Time, k meta.ThreadKey) (meta.LeaseID, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == 0 || !now.Before(l.validUntil) {
		return 0, false
	}
	return l.id, l.pins[k] == l.id
}

// keepLease sends heartbeats until ctx ends. It is started only on a
// gateway with a host id, after a first heartbeat succeeded.
func (g *Gateway) keepLease(ctx context.Context) {
	defer close(g.leaseDone)
	t := time.NewTicker(g.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lost, err := g.heartbeat(ctx)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("heartbeat failed", "host_id", g.cfg.HostID, "error", err)
		}
		if (lost || g.lease.valid(time.Now()) == 0) && g.fencing.CompareAndSwap(false, true) {
			// Ending jobs records their ends, which may wait on the
			// store: the heartbeats go on meanwhile.
			go func() {
				defer g.fencing.Store(false)
				g.fence()
			}()
		}
	}
}

// heartbeat renews the lease, or gets a new one when it lapsed (lost):
// then every pin made under the old one is gone, and the threads are
// pinned again, each at its next call, if no other host took them
// meanwhile.
func (g *Gateway) heartbeat(ctx context.Context) (lost bool, err error) {
	g.lease.mu.Lock()
	id := g.lease.id
	g.lease.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.RenewEvery)
	defer cancel()
	sent := time.Now()
	got, err := g.store.Heartbeat(ctx, g.cfg.HostID, id, g.cfg.ExpiresAfter)
	if errors.Is(err, meta.ErrLeaseLost) {
		lost = true
		g.log.Warn("lease lapsed: serving no pinned thread until a new lease and new pins", "host_id", g.cfg.HostID, "lease", id)
		g.lease.mu.Lock()
		g.lease.id = 0 // refuses every call until the new lease is in
		g.lease.mu.Unlock()
		sent = time.Now()
		got, err = g.store.Heartbeat(ctx, g.cfg.HostID, 0, g.cfg.ExpiresAfter)
	}
	if err != nil {
		return lost, err
	}
	g.lease.mu.Lock()
	if got != id {
		// A new lease: every pin made under the old one is gone.
		g.log.Info("lease granted", "host_id", g.cfg.HostID, "lease", got)
		g.lease.pins = make(map[meta.ThreadKey]meta.LeaseID)
	}
	g.lease.id, g.lease.validUntil = got, sent.Add(g.cfg.ExpiresAfter-leaseMargin)
	g.lease.mu.Unlock()
	return lost, nil
}

// fence takes down every thread this gateway serves, with its jail, its
// commands and jobs and its mount, once the lease is no longer valid:
// another host may take any of them now, and nothing of this gateway may
// go on writing in their folders. Their records stay: once this gateway
// holds a lease again, a call pins a thread again (if nobody took it) and
// mounts it again.
func (g *Gateway) fence() {
	// A jail or a job runs only in a mounted thread: the mounts are all.
	keys := g.threads.mountedKeys()
	for _, k := range keys {
		if _, err := g.takeDown(k, nil); err != nil {
			g.log.Error("fence: take down a thread", "tenant", k.Tenant, "thread", k.Thread, "error", err)
		}
	}
	if len(keys) > 0 {
		g.log.Warn("fenced: took down the threads this host may no longer own", "host_id", g.cfg.HostID, "threads", len(keys))
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
			return fmt.Errorf("read the pin of %s: %w", keyName(k), err)
		}
		return g.pinnedError(ctx, k, b, p.HostID)
	}
	id, held := g.lease.holds(time.Now(), k)
	if id == 0 {
		g.log.Warn("refused: no valid lease", "tenant", k.Tenant, "thread", k.Thread, "host_id", g.cfg.HostID)
		return errFenced
	}
	if held {
		return nil
	}
	p, err := g.store.Pin(ctx, k, g.cfg.HostID, id)
	switch {
	case errors.Is(err, meta.ErrPinned):
		return g.pinnedError(ctx, k, b, p.HostID)
	case errors.Is(err, meta.ErrLeaseLost):
		g.lease.mu.Lock()
		if g.lease.id == id {
			g.lease.validUntil = time.Time{}
		}
		g.lease.mu.Unlock()
		return errFenced
	case err != nil:
		return fmt.Errorf("pin %s: %w", keyName(k), err)
	}
	g.lease.mu.Lock()
	if g.lease.id == id {
		g.lease.pins[k] = id
	}
	g.lease.mu.Unlock()
	return nil
}

// errFenced refuses a call while this gateway's lease is not valid.
var errFenced error = &toolError{ErrFenced, "This server's lease on the metadata store lapsed: it serves no pinned thread until it renews it."}

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
	return &toolError{ErrPinned, fmt.Sprintf("The workspace of this thread is %s on the host %s. Only that host can continue the thread.", root, host)}
}

// goneError is the refusal of a thread whose folder is lost.
func goneError(b meta.Binding) error {
	return &toolError{ErrGone, fmt.Sprintf("The workspace of this thread, %s on the host %s, is gone, so the tools cannot work on it.",
		b.Root, hostName(b.HostID))}
}

// rootOf returns the backing folder of a binding: its recorded root if
// that is a workspace root of the binding's ids, in this gateway's
// workspaces folder or in one named "workspaces" (a thread taken over from
// another host keeps its folder there), else this gateway's own root for
// the ids. A root read from the store is trusted only in that shape, so a
// damaged record cannot make a delete remove anything else.
func (g *Gateway) rootOf(b meta.Binding) (string, error) {
	if b.Root != "" && filepath.IsAbs(b.Root) {
		base := filepath.Dir(filepath.Dir(b.Root))
		if filepath.Base(base) == "workspaces" || base == g.wsBase {
			if want, err := WorkspaceRoot(base, b.Tenant, b.Thread); err == nil && want == filepath.Clean(b.Root) {
				return want, nil
			}
		}
	}
	root, _, err := g.threadPaths(b.ThreadKey)
	return root, err
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
		return "", false, fmt.Errorf("mark %s gone: %w", keyName(k), err)
	}
	err = goneError(old)
	g.log.Warn("thread stranded: its workspace is not reachable", "tenant", k.Tenant, "thread", k.Thread, "root", old.Root, "host", old.HostID)
	g.emit(Event{Type: EventThreadStranded, Tenant: k.Tenant, Thread: k.Thread, Message: err.Error()})
	return "", false, err
}

// noteMovedJobs notes, once each, the jobs another host left running on a
// thread this gateway takes over. Jobs do not move. One that ran on this
// machine is stopped here (its cgroup is on this machine); one elsewhere
// may still run, and this gateway cannot stop it.
func (g *Gateway) noteMovedJobs(ctx context.Context, k meta.ThreadKey) {
	g.noteLeftJobs(ctx, k, "job of a former host noted", nil, func(rec meta.Job) (string, bool) {
		if rec.HostID == g.cfg.HostID {
			return "", false
		}
		id := jobID(rec.Seq)
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
func (g *Gateway) unpin(ctx context.Context, tenant, thread string) (ThreadInfo, error) {
	k, err := threadKey(tenant, thread)
	if err != nil {
		return ThreadInfo{}, err
	}
	if g.cfg.HostID == "" {
		return ThreadInfo{}, fmt.Errorf("%w: this server has no host id, so it pins nothing and cannot take a thread over", ErrInvalid)
	}
	p, err := g.store.GetPin(ctx, k)
	switch {
	case err == nil && p.HostID != g.cfg.HostID:
		return ThreadInfo{}, &toolError{ErrPinned, fmt.Sprintf("The thread is pinned to the live host %s; it can move only once that host's lease expires.", p.HostID)}
	case err != nil && !errors.Is(err, meta.ErrNotFound):
		return ThreadInfo{}, fmt.Errorf("unpin %s: %w", keyName(k), err)
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
