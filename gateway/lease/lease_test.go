package lease_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"warren/gateway/lease"
	"warren/meta"
	"warren/meta/badger"
)

// Every test ends with no goroutine of a session left: Close waits for
// them all.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The store satisfies what a session needs of it.
var _ lease.Hosts = meta.Store(nil)

const host = "web-1"

var (
	ka = meta.ThreadKey{Tenant: "acme", Thread: "a"}
	kb = meta.ThreadKey{Tenant: "acme", Thread: "b"}
	kc = meta.ThreadKey{Tenant: "acme", Thread: "c"}
)

// waitFor bounds every wait of these tests; nothing waits this long when
// the session works.
const waitFor = 20 * time.Second

func newStore(t *testing.T) meta.Store {
	t.Helper()
	s, err := badger.Open(context.Background(), filepath.Join(t.TempDir(), "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// beat is the outcome of one heartbeat the session sent.
type beat struct {
	sent time.Time
	got  meta.LeaseID
	err  error
}

// hosts is the real store with heartbeats a test can fail or hang, and
// reports every heartbeat on beats.
type hosts struct {
	meta.Store
	fail atomic.Bool // heartbeats fail at once
	hang atomic.Bool // heartbeats wait until their context ends
	// hanging is closed when the first hung heartbeat starts to wait;
	// inHang counts those waiting.
	hanging     chan struct{}
	hangingOnce sync.Once
	inHang      atomic.Int32
	beats       chan beat
	// onPin, when set, runs before each Pin reaches the store.
	onPin func()
}

func newHosts(t *testing.T) *hosts {
	return &hosts{Store: newStore(t), hanging: make(chan struct{}), beats: make(chan beat, 4096)}
}

func (h *hosts) Heartbeat(ctx context.Context, id string, l meta.LeaseID, ttl time.Duration) (meta.LeaseID, error) {
	b := beat{sent: time.Now()}
	switch {
	case h.hang.Load():
		h.inHang.Add(1)
		defer h.inHang.Add(-1)
		h.hangingOnce.Do(func() { close(h.hanging) })
		<-ctx.Done()
		b.err = ctx.Err()
	case h.fail.Load():
		b.err = meta.ErrUnavailable
	default:
		b.got, b.err = h.Store.Heartbeat(ctx, id, l, ttl)
	}
	select {
	case h.beats <- b:
	case <-ctx.Done():
	}
	return b.got, b.err
}

func (h *hosts) Pin(ctx context.Context, k meta.ThreadKey, id string, l meta.LeaseID) (meta.Pin, error) {
	if h.onPin != nil {
		h.onPin()
	}
	return h.Store.Pin(ctx, k, id, l)
}

// nextBeat returns the next heartbeat that passes ok.
func (h *hosts) nextBeat(t *testing.T, what string, ok func(beat) bool) beat {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case b := <-h.beats:
			if ok(b) {
				return b
			}
		case <-deadline:
			t.Fatalf("no heartbeat: %s", what)
		}
	}
}

// recorded waits until the session recorded a heartbeat that passes ok:
// heartbeats go one at a time, so once the next one is sent, the state of
// the former is in.
func (h *hosts) recorded(t *testing.T, what string, ok func(beat) bool) beat {
	t.Helper()
	b := h.nextBeat(t, what, ok)
	h.nextBeat(t, "the one after "+what, func(beat) bool { return true })
	return b
}

// fenceCall is one call of the fence callback.
type fenceCall struct {
	lease   meta.LeaseID
	threads []meta.ThreadKey
}

// fences records the fence calls on a channel.
func fences() (lease.FenceFunc, chan fenceCall) {
	ch := make(chan fenceCall, 64)
	return func(ctx context.Context, _ *lease.Session, l meta.LeaseID, threads []meta.ThreadKey) {
		ch <- fenceCall{l, threads}
	}, ch
}

func nextFence(t *testing.T, ch <-chan fenceCall) fenceCall {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(waitFor):
		t.Fatal("no fence")
		return fenceCall{}
	}
}

// start starts a session, closed at the test's end.
func start(t *testing.T, store lease.Hosts, cfg lease.Config) *lease.Session {
	t.Helper()
	cfg.HostID = host
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Warn, Name: t.Name()})
	s, err := lease.Start(context.Background(), store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func pin(t *testing.T, s *lease.Session, ks ...meta.ThreadKey) {
	t.Helper()
	for _, k := range ks {
		if _, err := s.Pin(context.Background(), k); err != nil {
			t.Fatalf("pin %v: %v", k, err)
		}
	}
}

func isDone(s *lease.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// TestRenew: heartbeats keep the lease past its length, with its pins,
// and the store sees the host alive.
func TestRenew(t *testing.T) {
	h := newHosts(t)
	fence, fenced := fences()
	const expires = 2 * time.Second
	begin := time.Now()
	s := start(t, h, lease.Config{RenewEvery: 50 * time.Millisecond, ExpiresAfter: expires, Fence: fence})
	first, held := s.Holds(ka)
	if first == 0 || held {
		t.Fatalf("after start: holds %v, %v; want a lease and no pin", first, held)
	}
	pin(t, s, ka)
	h.recorded(t, "past the first lease's length", func(b beat) bool { return b.err == nil && b.sent.After(begin.Add(expires)) })
	if id, held := s.Holds(ka); id != first || !held {
		t.Errorf("past the lease's length: holds %v, %v; want %v, true", id, held, first)
	}
	hs, err := h.ListHosts(context.Background())
	if err != nil || len(hs) != 1 || hs[0].ID != host || !hs[0].Alive {
		t.Errorf("hosts: %+v, %v", hs, err)
	}
	if len(fenced) != 0 {
		t.Errorf("fenced while renewed: %+v", <-fenced)
	}
	if isDone(s) {
		t.Error("Done closed before Close")
	}
	s.Close()
	if !isDone(s) {
		t.Error("Done open after Close")
	}
}

// TestLapse: heartbeats fail; the lease lapses by the clock: nothing is
// held, nothing can be pinned, the fence is called once with the pinned
// threads, and the session goes on (Done stays open). Once heartbeats
// succeed again there is a lease in force.
func TestLapse(t *testing.T) {
	h := newHosts(t)
	fence, fenced := fences()
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 700 * time.Millisecond, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, kb, ka)
	h.fail.Store(true)
	f := nextFence(t, fenced)
	if f.lease != first || !slices.Equal(f.threads, []meta.ThreadKey{ka, kb}) {
		t.Errorf("fence %+v; want lease %v, threads a and b", f, first)
	}
	if id, held := s.Holds(ka); id != 0 || held {
		t.Errorf("lapsed: holds %v, %v", id, held)
	}
	if _, err := s.Pin(context.Background(), kc); !errors.Is(err, meta.ErrLeaseLost) {
		t.Errorf("pin while lapsed: %v, want ErrLeaseLost", err)
	}
	if isDone(s) {
		t.Error("Done closed by a lapse")
	}

	h.fail.Store(false)
	resumed := time.Now()
	h.recorded(t, "once heartbeats succeed again", func(b beat) bool { return b.err == nil && b.sent.After(resumed) })
	id, held := s.Holds(ka)
	switch {
	case id == 0:
		t.Error("no lease in force once heartbeats succeed again")
	case id == first && !held:
		t.Error("the lease was renewed, but its pin of a is not held")
	case id != first && held:
		t.Error("a new lease holds a pin of the old one")
	}
	s.Close()
	close(fenced)
	for f := range fenced {
		t.Errorf("fenced again: %+v", f)
	}
}

// TestLost: the store ends the lease (another run of the host id took
// it): the fence is called with the old lease's threads, a new lease is
// taken at once, and a thread is held again only once pinned again.
func TestLost(t *testing.T) {
	h := newHosts(t)
	fence, fenced := fences()
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 10 * time.Second, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, ka)
	if _, err := h.Store.Heartbeat(context.Background(), host, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	f := nextFence(t, fenced)
	if f.lease != first || !slices.Equal(f.threads, []meta.ThreadKey{ka}) {
		t.Errorf("fence %+v; want lease %v, thread a", f, first)
	}
	b := h.recorded(t, "a new lease", func(b beat) bool { return b.err == nil && b.got != first })
	if id, held := s.Holds(ka); id != b.got || held {
		t.Errorf("after the loss: holds %v, %v; want %v, false", id, held, b.got)
	}
	pin(t, s, ka)
	if id, held := s.Holds(ka); id != b.got || !held {
		t.Errorf("pinned again: holds %v, %v; want %v, true", id, held, b.got)
	}
}

// TestPinLeaseLost: a pin the store refuses because the lease ended makes
// the lease count as lapsed at once, and fenced, before any heartbeat.
func TestPinLeaseLost(t *testing.T) {
	h := newHosts(t)
	fence, fenced := fences()
	// No heartbeat during the test: the pin alone must end the lease.
	s := start(t, h, lease.Config{RenewEvery: time.Hour, ExpiresAfter: 2 * time.Hour, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, ka)
	h.onPin = func() {
		if _, err := h.Store.Heartbeat(context.Background(), host, 0, time.Hour); err != nil {
			t.Error(err)
		}
	}
	if _, err := s.Pin(context.Background(), kb); !errors.Is(err, meta.ErrLeaseLost) {
		t.Fatalf("pin under a lease the store ended: %v", err)
	}
	if id, held := s.Holds(ka); id != 0 || held {
		t.Errorf("after the refused pin: holds %v, %v", id, held)
	}
	if f := nextFence(t, fenced); f.lease != first || !slices.Equal(f.threads, []meta.ThreadKey{ka}) {
		t.Errorf("fence %+v; want lease %v, thread a", f, first)
	}
}

// TestPinDuringLapse: a pin the store accepts, but under a lease that
// lapsed before the answer (its fence may have run without the thread),
// is refused and not held.
func TestPinDuringLapse(t *testing.T) {
	h := newHosts(t)
	fence, fenced := fences()
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 2 * time.Second, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, ka)
	var f fenceCall
	h.onPin = func() {
		// The store keeps the lease half a second longer than the
		// session counts it: only the session's view of it lapses
		// before the pin reaches the store.
		h.fail.Store(true)
		f = nextFence(t, fenced)
	}
	if _, err := s.Pin(context.Background(), kb); !errors.Is(err, meta.ErrLeaseLost) {
		t.Errorf("a pin answered after the lease lapsed: %v, want ErrLeaseLost", err)
	}
	if f.lease != first || !slices.Equal(f.threads, []meta.ThreadKey{ka}) {
		t.Errorf("fence %+v; want lease %v, thread a", f, first)
	}
	h.onPin = nil
	h.fail.Store(false)
	resumed := time.Now()
	h.recorded(t, "once heartbeats succeed again", func(b beat) bool { return b.err == nil && b.sent.After(resumed) })
	if id, held := s.Holds(kb); id == 0 || held {
		t.Errorf("renewed: holds b %v, %v; want a lease, not b", id, held)
	}
}

// TestPinned: a thread another host holds is refused with its pin.
func TestPinned(t *testing.T) {
	h := newHosts(t)
	ctx := context.Background()
	other, err := h.Store.Heartbeat(ctx, "web-2", 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Pin(ctx, ka, "web-2", other); err != nil {
		t.Fatal(err)
	}
	s := start(t, h, lease.Config{RenewEvery: time.Hour, ExpiresAfter: 2 * time.Hour})
	p, err := s.Pin(ctx, ka)
	if !errors.Is(err, meta.ErrPinned) || p.HostID != "web-2" {
		t.Fatalf("pin of another host's thread: %+v, %v", p, err)
	}
	if id, held := s.Holds(ka); id == 0 || held {
		t.Errorf("holds %v, %v; want the lease, not the pin", id, held)
	}
	if err := s.Unpin(ctx, ka); err != nil {
		t.Errorf("unpin of another host's pin: %v", err)
	}
	if p, err := h.Store.GetPin(ctx, ka); err != nil || p.HostID != "web-2" {
		t.Errorf("another host's pin after Unpin: %+v, %v", p, err)
	}
}

// TestUnpin: an unpinned thread is no longer held, nor pinned in the
// store.
func TestUnpin(t *testing.T) {
	h := newHosts(t)
	ctx := context.Background()
	s := start(t, h, lease.Config{RenewEvery: time.Hour, ExpiresAfter: 2 * time.Hour})
	pin(t, s, ka)
	if err := s.Unpin(ctx, ka); err != nil {
		t.Fatal(err)
	}
	if _, held := s.Holds(ka); held {
		t.Error("held after Unpin")
	}
	if p, err := h.Store.GetPin(ctx, ka); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("pin in the store after Unpin: %+v, %v", p, err)
	}
}

// TestFenceSparesRepinned: a fence that reaches a thread pinned again
// under the new lease finds it held (and so spares it, as the gateway
// does), while the threads not pinned again are not held.
func TestFenceSparesRepinned(t *testing.T) {
	h := newHosts(t)
	type verdict struct {
		down, spared []meta.ThreadKey
	}
	entered, release, verdicts := make(chan struct{}), make(chan struct{}), make(chan verdict, 1)
	fence := func(ctx context.Context, s *lease.Session, l meta.LeaseID, threads []meta.ThreadKey) {
		// A long fence: the heartbeats go on meanwhile.
		close(entered)
		<-release
		var v verdict
		for _, k := range threads {
			if _, held := s.Holds(k); held {
				v.spared = append(v.spared, k)
			} else {
				v.down = append(v.down, k)
			}
		}
		verdicts <- v
	}
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 10 * time.Second, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, ka, kb)
	if _, err := h.Store.Heartbeat(context.Background(), host, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	h.recorded(t, "a new lease", func(b beat) bool { return b.err == nil && b.got != first })
	pin(t, s, kb)
	close(release)
	select {
	case v := <-verdicts:
		if !slices.Equal(v.down, []meta.ThreadKey{ka}) || !slices.Equal(v.spared, []meta.ThreadKey{kb}) {
			t.Errorf("fence took down %v and spared %v; want a down, b spared", v.down, v.spared)
		}
	case <-time.After(waitFor):
		t.Fatal("the fence did not end")
	}
}

// TestFenceQueued: a lease that ends while the fence of a former one
// runs is fenced next, with its own threads: fences run one at a time and
// none is dropped.
func TestFenceQueued(t *testing.T) {
	h := newHosts(t)
	release := make(chan struct{})
	calls := make(chan fenceCall, 8)
	fence := func(ctx context.Context, _ *lease.Session, l meta.LeaseID, threads []meta.ThreadKey) {
		calls <- fenceCall{l, threads}
		<-release
	}
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 10 * time.Second, Fence: fence})
	first, _ := s.Holds(ka)
	pin(t, s, ka)
	steal := func() {
		t.Helper()
		if _, err := h.Store.Heartbeat(context.Background(), host, 0, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	steal()
	if f := nextFence(t, calls); f.lease != first || !slices.Equal(f.threads, []meta.ThreadKey{ka}) {
		t.Errorf("first fence %+v; want lease %v, thread a", f, first)
	}
	b := h.recorded(t, "a second lease", func(b beat) bool { return b.err == nil && b.got != first })
	pin(t, s, kb)
	steal()
	h.recorded(t, "a third lease", func(x beat) bool { return x.err == nil && x.got != first && x.got != b.got })
	if len(calls) != 0 {
		t.Error("a second fence ran while the first did")
	}
	close(release)
	if f := nextFence(t, calls); f.lease != b.got || !slices.Equal(f.threads, []meta.ThreadKey{kb}) {
		t.Errorf("second fence %+v; want lease %v, thread b", f, b.got)
	}
}

// TestTwoSessionsOneHost: a second session on a host id takes the host's
// lease over; the first learns it at its next heartbeat, fences its
// threads and takes a new lease, which ends the second's: a pin under it
// is refused and the second fences in turn. One host id is one holder.
func TestTwoSessionsOneHost(t *testing.T) {
	h1 := newHosts(t)
	fence1, fenced1 := fences()
	s1 := start(t, h1, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 10 * time.Second, Fence: fence1})
	l1, _ := s1.Holds(ka)
	pin(t, s1, ka)

	fence2, fenced2 := fences()
	// The second beats no more during the test: s1 beats last.
	s2 := start(t, h1.Store, lease.Config{RenewEvery: time.Hour, ExpiresAfter: 2 * time.Hour, Fence: fence2})
	l2, _ := s2.Holds(ka)
	if l2 == 0 || l2 == l1 {
		t.Fatalf("the second session's lease %v (the first's %v)", l2, l1)
	}
	if f := nextFence(t, fenced1); f.lease != l1 || !slices.Equal(f.threads, []meta.ThreadKey{ka}) {
		t.Errorf("the first's fence %+v; want lease %v, thread a", f, l1)
	}
	b := h1.recorded(t, "the first's new lease", func(b beat) bool { return b.err == nil && b.got != l1 })
	if b.got == l2 {
		t.Fatalf("the first got the second's lease %v", l2)
	}
	if _, err := s2.Pin(context.Background(), ka); !errors.Is(err, meta.ErrLeaseLost) {
		t.Errorf("the second's pin once the first took the lease back: %v, want ErrLeaseLost", err)
	}
	if id, _ := s2.Holds(ka); id != 0 {
		t.Errorf("the second holds %v once its lease was refused", id)
	}
	if f := nextFence(t, fenced2); f.lease != l2 || len(f.threads) != 0 {
		t.Errorf("the second's fence %+v; want lease %v, no thread", f, l2)
	}
	pin(t, s1, ka)
	if id, held := s1.Holds(ka); id != b.got || !held {
		t.Errorf("the first: holds %v, %v; want %v, true", id, held, b.got)
	}
}

// TestCloseWaitsForFence: Close cancels a fence under way and returns only
// once it returned, also when called twice at once.
func TestCloseWaitsForFence(t *testing.T) {
	h := newHosts(t)
	entered := make(chan struct{})
	var finished atomic.Bool
	fence := func(ctx context.Context, _ *lease.Session, l meta.LeaseID, threads []meta.ThreadKey) {
		close(entered)
		<-ctx.Done()
		finished.Store(true)
	}
	s := start(t, h, lease.Config{RenewEvery: 20 * time.Millisecond, ExpiresAfter: 10 * time.Second, Fence: fence})
	if _, err := h.Store.Heartbeat(context.Background(), host, 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	<-entered
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			s.Close()
			if !finished.Load() {
				t.Error("Close returned before the fence did")
			}
			if !isDone(s) {
				t.Error("Done open after Close")
			}
		})
	}
	wg.Wait()
}

// TestCloseWaitsForHeartbeat: Close ends a heartbeat the store hangs and
// returns only once it returned.
func TestCloseWaitsForHeartbeat(t *testing.T) {
	h := newHosts(t)
	// A heartbeat's own timeout is RenewEvery: long enough that only
	// Close ends the hung one.
	s := start(t, h, lease.Config{RenewEvery: 200 * time.Millisecond, ExpiresAfter: 10 * time.Second})
	h.hang.Store(true)
	<-h.hanging
	s.Close()
	if n := h.inHang.Load(); n != 0 {
		t.Errorf("Close returned with %d heartbeats still in the store", n)
	}
}

// TestStartFails: a first heartbeat that fails fails Start, and leaves no
// goroutine.
func TestStartFails(t *testing.T) {
	h := newHosts(t)
	ignore := goleak.IgnoreCurrent() // the store's
	h.fail.Store(true)
	_, err := lease.Start(context.Background(), h, lease.Config{HostID: host, RenewEvery: 20 * time.Millisecond, ExpiresAfter: time.Second})
	if !errors.Is(err, meta.ErrUnavailable) {
		t.Errorf("start over a failing store: %v", err)
	}
	if _, err := lease.Start(context.Background(), h, lease.Config{HostID: host, RenewEvery: time.Second, ExpiresAfter: time.Second}); err == nil {
		t.Error("start with a lease shorter than its renewal and margin")
	}
	goleak.VerifyNone(t, ignore)
}
