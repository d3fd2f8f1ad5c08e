package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/meta"
)

// Margin is taken off the lease's length when the session counts it valid,
// for clock rates and the time between reading the clock and sending the
// heartbeat. Config.ExpiresAfter must be longer than RenewEvery and it.
const Margin = 500 * time.Millisecond

// Hosts is the part of the metadata store a session uses. meta.Store
// satisfies it.
type Hosts interface {
	// Heartbeat renews host's lease, or grants a new one when lease is
	// zero; meta.ErrLeaseLost when a non-zero lease ended.
	Heartbeat(ctx context.Context, host string, lease meta.LeaseID, ttl time.Duration) (meta.LeaseID, error)
	// Pin makes host, under its live lease, the owner of thread k, unless
	// another host holds a live pin on it (meta.ErrPinned, with that pin).
	Pin(ctx context.Context, k meta.ThreadKey, host string, lease meta.LeaseID) (meta.Pin, error)
	// Unpin removes host's pin of thread k.
	Unpin(ctx context.Context, k meta.ThreadKey, host string) error
}

// FenceFunc takes down what a host serves of threads it may no longer own.
// s is the session calling it (it may run before Start has returned s to
// its caller). lease is the lease that ended, threads every thread pinned
// under it, ordered by tenant then thread. Some may have been pinned
// again under the lease now in force by the time the callback reaches
// them: it must check s.Holds under the lock that orders its pins and
// take-downs of a thread, and spare those held. A mounted thread missing
// from threads (none should be) is the callee's to judge. ctx ends when
// the session is closed.
type FenceFunc func(ctx context.Context, s *Session, lease meta.LeaseID, threads []meta.ThreadKey)

// Config sets up a session.
type Config struct {
	// HostID is the host whose lease the session holds; required.
	HostID string
	// RenewEvery is the time between heartbeats; ExpiresAfter the lease's
	// length, which must exceed RenewEvery plus Margin.
	RenewEvery   time.Duration
	ExpiresAfter time.Duration
	// Fence is called when a lease ends (see FenceFunc); nil fences
	// nothing.
	Fence FenceFunc
	// Logger gets the lease's changes; nil logs nothing.
	Logger hclog.Logger
}

// Session is a host's lease and the threads pinned under it. Start makes
// one; Close ends it.
type Session struct {
	// Set by Start, never changed.
	store Hosts
	cfg   Config
	log   hclog.Logger
	stop  context.CancelFunc // ends both goroutines
	wg    sync.WaitGroup     // counts them
	// wake tells the fence goroutine that the lease changed (ended, or got
	// a new validity to wait for). It holds one signal; more are merged.
	wake      chan struct{}
	done      chan struct{} // closed by Close once the goroutines ended
	closeOnce sync.Once

	// mu guards the fields below; it is a leaf (see the package doc).
	mu sync.Mutex
	// id is the lease in force, 0 while there is none; validUntil is when
	// it stops counting, by this process's monotonic clock.
	id         meta.LeaseID
	validUntil time.Time
	// pins are the threads pinned under id.
	pins map[meta.ThreadKey]struct{}
	// lapseFenced is set once a lapse of id was handed to the fence; a
	// heartbeat that renews id clears it.
	lapseFenced bool
	// ended are fences due for leases that ended, oldest first, not yet
	// taken by the fence goroutine.
	ended []fence
}

// fence is one call of Config.Fence due.
type fence struct {
	lease   meta.LeaseID
	threads []meta.ThreadKey
	lapsed  bool // by the clock, not by the store's refusal of a heartbeat
}

// Start takes a lease for cfg.HostID with a first heartbeat, then keeps
// it until Close. ctx bounds the first heartbeat only.
func Start(ctx context.Context, store Hosts, cfg Config) (*Session, error) {
	if cfg.HostID == "" {
		return nil, errors.New("lease: start: no host id")
	}
	if cfg.RenewEvery <= 0 || cfg.ExpiresAfter <= cfg.RenewEvery+Margin {
		return nil, fmt.Errorf("lease: start: renew every %v must be positive, and expires after %v longer than it and a margin of %v",
			cfg.RenewEvery, cfg.ExpiresAfter, Margin)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Session{
		store: store,
		cfg:   cfg,
		log:   cfg.Logger,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		pins:  make(map[meta.ThreadKey]struct{}),
	}
	// The first lease, before anything is served: a host that cannot
	// hold its id serves nothing pinned.
	if err := s.heartbeat(ctx); err != nil {
		return nil, fmt.Errorf("lease: first heartbeat of host %q: %w", cfg.HostID, err)
	}
	run, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(2)
	go s.keep(run)
	go s.fenceLoop(run)
	return s, nil
}

// Holds returns the lease in force now (0 if none), and whether thread k
// is pinned under it. It costs a map look-up and a clock read: a pin made
// under the lease in force holds until the lease ends, so it is not read
// again from the store.
func (s *Session) Holds(k meta.ThreadKey) (meta.LeaseID, bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.validAt(now) {
		return 0, false
	}
	_, pinned := s.pins[k]
	return s.id, pinned
}

// Valid reports whether a lease is in force now, and until when it counts
// (by this process's clock) unless a heartbeat renews it. A host without
// one serves no pinned thread: it is fenced.
func (s *Session) Valid() (bool, time.Time) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.validAt(now) {
		return false, time.Time{}
	}
	return true, s.validUntil
}

// Pin pins thread k under the lease in force and records it, so Holds
// reports it. It fails with meta.ErrPinned (and returns the owner's pin)
// while another host holds k, and with meta.ErrLeaseLost when no lease is
// in force, or the lease ended before the store answered: a lease the
// store refused counts as lapsed from then on, and is fenced.
func (s *Session) Pin(ctx context.Context, k meta.ThreadKey) (meta.Pin, error) {
	s.mu.Lock()
	id, valid := s.id, s.validAt(time.Now())
	s.mu.Unlock()
	if !valid {
		return meta.Pin{}, fmt.Errorf("lease: pin %q/%q: no lease in force: %w", k.Tenant, k.Thread, meta.ErrLeaseLost)
	}
	p, err := s.store.Pin(ctx, k, s.cfg.HostID, id)
	if errors.Is(err, meta.ErrLeaseLost) {
		s.mu.Lock()
		if s.id == id {
			s.validUntil = time.Time{}
		}
		s.mu.Unlock()
		s.kick()
	}
	if err != nil {
		return p, fmt.Errorf("lease: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != id || !s.validAt(time.Now()) {
		// The fence of that lease may have run already without k.
		return meta.Pin{}, fmt.Errorf("lease: pin %q/%q: the lease ended meanwhile: %w", k.Tenant, k.Thread, meta.ErrLeaseLost)
	}
	s.pins[k] = struct{}{}
	return p, nil
}

// Unpin removes this host's pin of thread k from the store and from the
// session. The session forgets it even when the store call fails: such a
// pin runs out with the lease.
func (s *Session) Unpin(ctx context.Context, k meta.ThreadKey) error {
	err := s.store.Unpin(ctx, k, s.cfg.HostID)
	s.mu.Lock()
	delete(s.pins, k)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	return nil
}

// Done is closed when the session ended: by Close, once its goroutines
// returned. A lease that ends does not end the session (see the package
// doc).
func (s *Session) Done() <-chan struct{} { return s.done }

// Close ends the heartbeats and waits for them and for a fence under way,
// whose context it cancels. It does not revoke the lease. It may be called
// more than once, also at once.
func (s *Session) Close() {
	s.closeOnce.Do(func() {
		s.stop()
		s.wg.Wait()
		close(s.done)
	})
}

// validAt says whether the lease counts at now. s.mu must be held.
func (s *Session) validAt(now time.Time) bool {
	return s.id != 0 && now.Before(s.validUntil)
}

// kick wakes the fence goroutine without waiting for it.
func (s *Session) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// keep sends a heartbeat every RenewEvery until ctx ends.
func (s *Session) keep(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.heartbeat(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("heartbeat failed", "host_id", s.cfg.HostID, "error", err)
		}
	}
}

// heartbeat renews the lease, or gets a new one when the store says it
// ended (lost): then every pin made under the old one is gone, its fence
// is due, and the threads are pinned again, each at its next call, if no
// other host took them meanwhile. Only Start and keep call it, one at a
// time, so only it changes s.id.
func (s *Session) heartbeat(ctx context.Context) error {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RenewEvery)
	defer cancel()
	sent := time.Now()
	got, err := s.store.Heartbeat(ctx, s.cfg.HostID, id, s.cfg.ExpiresAfter)
	if errors.Is(err, meta.ErrLeaseLost) {
		s.log.Warn("lease lapsed: serving no pinned thread until a new lease and new pins", "host_id", s.cfg.HostID, "lease", id)
		s.mu.Lock()
		s.endLocked() // refuses every pinned thread until the new lease is in
		s.mu.Unlock()
		s.kick()
		sent = time.Now()
		got, err = s.store.Heartbeat(ctx, s.cfg.HostID, 0, s.cfg.ExpiresAfter)
	}
	if err != nil {
		return err // the store's errors name the call and the host
	}
	s.mu.Lock()
	if got != s.id {
		// A new lease (a store may also grant one without saying the old
		// one was lost): every pin made under the old one is gone.
		s.endLocked()
		s.log.Info("lease granted", "host_id", s.cfg.HostID, "lease", got)
		s.id = got
	}
	s.validUntil = sent.Add(s.cfg.ExpiresAfter - Margin)
	s.lapseFenced = false
	s.mu.Unlock()
	// The fence goroutine waits for the new end of the lease.
	s.kick()
	return nil
}

// endLocked ends the lease in force: its fence is due, with its pins,
// unless its lapse was fenced already (no pin is added while it lapsed).
// s.mu must be held.
func (s *Session) endLocked() {
	if s.id != 0 && !s.lapseFenced {
		s.ended = append(s.ended, fence{lease: s.id, threads: sortedKeys(s.pins)})
	}
	s.id, s.validUntil, s.lapseFenced = 0, time.Time{}, false
	s.pins = make(map[meta.ThreadKey]struct{})
}

// fenceLoop calls Config.Fence for every lease that ends, one at a time,
// until ctx ends.
func (s *Session) fenceLoop(ctx context.Context) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		f, due, lapseAt := s.nextFence(time.Now())
		if due {
			if ctx.Err() != nil {
				return
			}
			if f.lapsed {
				s.log.Warn("lease lapsed: no heartbeat succeeded in time; serving no pinned thread until it is renewed",
					"host_id", s.cfg.HostID, "lease", f.lease)
			}
			if s.cfg.Fence != nil {
				s.cfg.Fence(ctx, s, f.lease, f.threads)
			}
			continue
		}
		var lapse <-chan time.Time
		if !lapseAt.IsZero() {
			timer.Reset(time.Until(lapseAt))
			lapse = timer.C
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.wake:
		case <-lapse:
		}
		timer.Stop()
	}
}

// nextFence takes the next fence due at now, if any; else it returns when
// the lease in force lapses unless renewed (zero if nothing is to wait
// for).
func (s *Session) nextFence(now time.Time) (f fence, due bool, lapseAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ended) > 0 {
		f = s.ended[0]
		s.ended = s.ended[1:]
		return f, true, time.Time{}
	}
	if s.id == 0 || s.lapseFenced {
		return fence{}, false, time.Time{}
	}
	if s.validAt(now) {
		return fence{}, false, s.validUntil
	}
	s.lapseFenced = true
	return fence{lease: s.id, threads: sortedKeys(s.pins), lapsed: true}, true, time.Time{}
}

// sortedKeys lists pins by tenant, then thread.
func sortedKeys(pins map[meta.ThreadKey]struct{}) []meta.ThreadKey {
	return slices.SortedFunc(maps.Keys(pins), func(a, b meta.ThreadKey) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Thread, b.Thread))
	})
}
