package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/lease"
	"warren/meta"
)

// Config is what the hosts room needs.
type Config struct {
	// HostID is this daemon's host id; "" pins nothing.
	HostID       string
	RenewEvery   time.Duration
	ExpiresAfter time.Duration
	// Fence takes down the threads a lease that ended covered (see
	// lease.FenceFunc); it may run from the first heartbeat on.
	Fence  lease.FenceFunc
	Store  meta.Store
	Logger hclog.Logger
}

// Hosts is this daemon's hold on its host id. Start makes one; call Close
// when finished.
type Hosts struct {
	// Set by Start, never changed.
	cfg   Config
	log   hclog.Logger
	store meta.Store
	// lease is the host's lease session, nil without a host id. It owns
	// its heartbeat and fence goroutines; Close ends them.
	lease *lease.Session
}

// Start takes the host's lease, before anything is served: a daemon that
// cannot hold its host id serves nothing pinned. ctx bounds the first
// heartbeat only. Without a host id there is no lease.
func Start(ctx context.Context, cfg Config) (*Hosts, error) {
	h := &Hosts{cfg: cfg, log: cfg.Logger, store: cfg.Store}
	if cfg.HostID == "" {
		return h, nil
	}
	s, err := lease.Start(ctx, cfg.Store, lease.Config{
		HostID:       cfg.HostID,
		RenewEvery:   cfg.RenewEvery,
		ExpiresAfter: cfg.ExpiresAfter,
		Fence:        cfg.Fence,
		Logger:       cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	h.lease = s
	return h, nil
}

// Close stops the heartbeats and waits for a fence under way, so that no
// fence runs behind the daemon's last unmounts, nor once the caller
// closes the store. The lease is not revoked: it runs out, and a restart
// of this host in time takes its pins over without a gap.
func (h *Hosts) Close() {
	if h.lease != nil {
		h.lease.Close()
	}
}

// ID is this daemon's host id ("" for none).
func (h *Hosts) ID() string { return h.cfg.HostID }

// ErrFenced refuses a call while this daemon's lease is not valid.
var ErrFenced error = call.Refuse(api.ErrFenced, "This server's lease on the metadata store lapsed: it serves no pinned thread until it renews it.")

// Claim makes sure this daemon may serve thread k: nil if it holds k's
// pin (pinning k now if nobody else holds it), ErrPinned naming the owner,
// or ErrFenced while its own lease is not valid. b is k's binding, if it
// has one, for the owner's folder in the refusal. A daemon without a host
// id pins nothing; it refuses only threads another host holds a live pin
// on.
func (h *Hosts) Claim(ctx context.Context, k meta.ThreadKey, b *meta.Binding) error {
	if h.cfg.HostID == "" {
		if b == nil || b.HostID == "" {
			return nil
		}
		p, err := h.store.GetPin(ctx, k)
		if errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the pin of %s: %w", call.KeyName(k), err)
		}
		return h.PinnedError(ctx, k, b, p.HostID)
	}
	id, held := h.lease.Holds(k)
	if id == 0 {
		h.log.Warn("refused: no valid lease", "tenant", k.Tenant, "thread", k.Thread, "host_id", h.cfg.HostID)
		return ErrFenced
	}
	if held {
		return nil
	}
	p, err := h.lease.Pin(ctx, k)
	switch {
	case errors.Is(err, meta.ErrPinned):
		return h.PinnedError(ctx, k, b, p.HostID)
	case errors.Is(err, meta.ErrLeaseLost):
		return ErrFenced
	case err != nil:
		return fmt.Errorf("pin %s: %w", call.KeyName(k), err)
	}
	return nil
}

// PinnedError is the refusal of thread k, which host owns; b is k's
// binding if the caller has it (else it is read), for the owner's folder.
func (h *Hosts) PinnedError(ctx context.Context, k meta.ThreadKey, b *meta.Binding, host string) error {
	if b == nil {
		if cur, err := h.store.GetBinding(ctx, k); err == nil {
			b = &cur
		}
	}
	root := "(not recorded)"
	if b != nil && b.HostID == host {
		root = b.Root
	}
	h.log.Warn("refused: thread pinned to another host", "tenant", k.Tenant, "thread", k.Thread, "path", root, "owner", host)
	return call.Refuse(api.ErrPinned, fmt.Sprintf("The workspace of this thread is %s on the host %s. Only that host can continue the thread.", root, host))
}

// GoneError is the refusal of a thread whose folder is lost.
func GoneError(b meta.Binding) error {
	return call.Refuse(api.ErrGone, fmt.Sprintf("The workspace of this thread, %s on the host %s, is gone, so the tools cannot work on it.",
		b.Root, call.HostName(b.HostID)))
}

// Owner returns the host that holds b's pin now, if any live one does.
// Only pinned bindings (made by a daemon with a host id) are looked up.
func (h *Hosts) Owner(ctx context.Context, b meta.Binding) string {
	if b.HostID == "" {
		return ""
	}
	p, err := h.store.GetPin(ctx, b.ThreadKey)
	if err != nil {
		return ""
	}
	return p.HostID
}

// MayUnpin refuses to move thread k to this daemon while a live host
// holds it (or when this daemon pins nothing); nil means the caller may
// bind it here, which takes the pin.
func (h *Hosts) MayUnpin(ctx context.Context, k meta.ThreadKey) error {
	if h.cfg.HostID == "" {
		return fmt.Errorf("%w: this server has no host id, so it pins nothing and cannot take a thread over", api.ErrInvalid)
	}
	p, err := h.store.GetPin(ctx, k)
	switch {
	case err == nil && p.HostID != h.cfg.HostID:
		return call.Refuse(api.ErrPinned, fmt.Sprintf("The thread is pinned to the live host %s; it can move only once that host's lease expires.", p.HostID))
	case err != nil && !errors.Is(err, meta.ErrNotFound):
		return fmt.Errorf("unpin %s: %w", call.KeyName(k), err)
	}
	return nil
}

// Forget drops k's pin, for a deleted thread: the last record of its
// delete. A failure is logged: the pin runs out with this host's lease,
// and holds no thread.
func (h *Hosts) Forget(ctx context.Context, k meta.ThreadKey) {
	if h.lease == nil {
		return
	}
	if err := h.lease.Unpin(ctx, k); err != nil {
		h.log.Warn("unpin a deleted thread", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	}
}

// Holds says under which lease this daemon holds k's pin, if it does
// (lease.Session.Holds); 0 without a valid lease or a host id.
func (h *Hosts) Holds(k meta.ThreadKey) (meta.LeaseID, bool) {
	if h.lease == nil {
		return 0, false
	}
	return h.lease.Holds(k)
}

// Valid says whether the lease is valid now and until when; a daemon
// without a host id has no lease to lose: always valid, no end.
func (h *Hosts) Valid() (bool, time.Time) {
	if h.lease == nil {
		return h.cfg.HostID == "", time.Time{}
	}
	return h.lease.Valid()
}

// List lists the hosts the store knows.
func (h *Hosts) List(ctx context.Context) ([]meta.Host, error) {
	hs, err := h.store.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return hs, nil
}

// MachineID names the machine, so a daemon can tell the jobs it could
// stop (their cgroups are on this machine) from those of other machines.
func MachineID() string {
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
