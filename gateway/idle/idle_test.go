package idle_test

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"warren/api"
	"warren/gateway/idle"
	"warren/gateway/threads"
	"warren/meta"
	"warren/meta/badger"
)

// The reclaimer's promises, with fakes of the threads, the jails and the
// jobs, and a real store (Badger) holding the threads' settings. The
// reclaimer looks every 500 ms: the tests wait for what it does (a
// channel a fake closes, or a count of its looks), never a fixed time.

// Every test ends with no goroutine of a reclaimer left: Close waits for
// it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fake is the threads, the jails and the jobs, as the reclaimer sees
// them. Each look starts with ReclaimIdle, which notes the closes so far.
type fake struct {
	mu sync.Mutex
	// mounted lists the mounted threads; a close takes one out.
	mounted []meta.ThreadKey
	// busy threads: a job running, a command running; grow: requests
	// that grow at each look, touched: touched at each look.
	jobs, runs, grow, touched map[meta.ThreadKey]bool
	requests                  uint64
	// closeErr fails the closes while set.
	closeErr error
	// closes are the closes asked, in order, with their messages.
	closes []closeCall
	// looks counts the looks begun; closesAt[i] is len(closes) when look
	// i+1 began.
	looks    int
	closesAt []int
	// tick is signalled at each look, closed is closed at the first
	// close.
	tick   chan struct{}
	closed chan struct{}
	// stopped is set once Close returned: a call after it is an error.
	stopped  bool
	lateCall string
	// hold, if not nil, holds the first look's ReclaimIdle until it is
	// closed; entered is closed once it is held.
	hold, entered chan struct{}
	// inLook is set while ReclaimIdle runs (false once it returned).
	inLook bool
}

type closeCall struct {
	k   meta.ThreadKey
	why string
}

func newFake(mounted ...meta.ThreadKey) *fake {
	return &fake{
		mounted: mounted,
		jobs:    map[meta.ThreadKey]bool{}, runs: map[meta.ThreadKey]bool{},
		grow: map[meta.ThreadKey]bool{}, touched: map[meta.ThreadKey]bool{},
		tick: make(chan struct{}, 1), closed: make(chan struct{}),
	}
}

// late notes a call made after Close returned. f.mu is held.
func (f *fake) late(what string) {
	if f.stopped && f.lateCall == "" {
		f.lateCall = what
	}
}

func (f *fake) Uses() []threads.Use {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.late("Uses")
	f.requests++
	var us []threads.Use
	for _, k := range f.mounted {
		u := threads.Use{Key: k}
		if f.grow[k] {
			u.Requests = f.requests
		}
		if f.touched[k] {
			u.Touched = time.Now()
		}
		us = append(us, u)
	}
	return us
}

func (f *fake) CloseWith(ctx context.Context, tenant, thread, why string) (api.ThreadInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.late("CloseWith")
	k := meta.ThreadKey{Tenant: tenant, Thread: thread}
	f.closes = append(f.closes, closeCall{k, why})
	if len(f.closes) == 1 {
		close(f.closed)
	}
	if f.closeErr != nil {
		return api.ThreadInfo{}, f.closeErr
	}
	f.mounted = slices.DeleteFunc(f.mounted, func(m meta.ThreadKey) bool { return m == k })
	return api.ThreadInfo{}, nil
}

func (f *fake) ReclaimIdle() {
	f.mu.Lock()
	f.late("ReclaimIdle")
	f.looks++
	f.closesAt = append(f.closesAt, len(f.closes))
	hold, entered := f.hold, f.entered
	f.hold = nil
	f.inLook = true
	f.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	f.mu.Lock()
	f.inLook = false
	f.mu.Unlock()
	select {
	case f.tick <- struct{}{}:
	default:
	}
}

func (f *fake) LastUsed(k meta.ThreadKey) (time.Time, bool) { return time.Time{}, false }

func (f *fake) Runs(k meta.ThreadKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.late("Runs")
	return f.runs[k]
}

func (f *fake) Running(k meta.ThreadKey) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.late("Running")
	if f.jobs[k] {
		return 1
	}
	return 0
}

func (f *fake) closeCalls() []closeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.closes)
}

// waitLooks waits until the reclaimer began n looks in all.
func (f *fake) waitLooks(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		looks := f.looks
		f.mu.Unlock()
		if looks >= n {
			return
		}
		select {
		case <-f.tick:
		case <-deadline:
			t.Fatalf("the reclaimer began %d looks in 30s, want %d", looks, n)
		}
	}
}

func (f *fake) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-f.closed:
	case <-time.After(30 * time.Second):
		t.Fatal("no thread closed in 30s")
	}
}

func (f *fake) looksSoFar() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.looks
}

// newStore is a store holding a binding of each key with settings s.
func newStore(t *testing.T, bs map[meta.ThreadKey]meta.Settings) meta.Store {
	t.Helper()
	ctx := context.Background()
	s, err := badger.Open(ctx, filepath.Join(t.TempDir(), "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	for k, set := range bs {
		if _, err := s.CreateBinding(ctx, meta.Binding{ThreadKey: k, State: meta.StateBound, Settings: set, BoundAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func start(t *testing.T, f *fake, store meta.Store, closeIdle time.Duration) *idle.Reclaimer {
	t.Helper()
	r := idle.Start(idle.Config{Threads: f, Jails: f, Jobs: f, Store: store, CloseIdle: closeIdle, Logger: hclog.NewNullLogger()})
	t.Cleanup(r.Close)
	return r
}

func key(thread string) meta.ThreadKey { return meta.ThreadKey{Tenant: "acme", Thread: thread} }

var whyRe = regexp.MustCompile(`^closed after [0-9]+s without use; the folder is kept$`)

// TestIdleThreadClosedOnce: a thread unused for its close idle time (its
// settings', 1 s) is closed, once, with a message saying how long it was
// unused; one whose settings say never (-1), or that has no setting on a
// daemon without a close idle time, or no record, stays.
func TestIdleThreadClosedOnce(t *testing.T) {
	t.Parallel()
	idleT, never, dflt, norec := key("idle"), key("never"), key("default"), key("no-record")
	store := newStore(t, map[meta.ThreadKey]meta.Settings{
		idleT: {CloseIdleSeconds: 1}, never: {CloseIdleSeconds: -1}, dflt: {},
	})
	f := newFake(idleT, never, dflt, norec)
	began := time.Now()
	start(t, f, store, 0)

	f.waitClosed(t)
	if d := time.Since(began); d < time.Second {
		t.Errorf("closed after %v, before its idle time of 1s", d)
	}
	// Some looks more: the first close's look has ended, and no other
	// close followed.
	f.waitLooks(t, f.looksSoFar()+4)
	cs := f.closeCalls()
	if len(cs) != 1 || cs[0].k != idleT {
		t.Fatalf("closes: %+v, want one of %v", cs, idleT)
	}
	if !whyRe.MatchString(cs[0].why) {
		t.Errorf("message %q, want %s", cs[0].why, whyRe)
	}
}

// TestDaemonCloseIdle: a thread without a setting of its own is closed
// after the daemon's close idle time.
func TestDaemonCloseIdle(t *testing.T) {
	t.Parallel()
	k := key("t")
	store := newStore(t, map[meta.ThreadKey]meta.Settings{k: {}})
	f := newFake(k)
	start(t, f, store, time.Second)
	f.waitClosed(t)
	if cs := f.closeCalls(); len(cs) != 1 || cs[0].k != k || !whyRe.MatchString(cs[0].why) {
		t.Errorf("closes: %+v", cs)
	}
}

// TestBusyThreadsStay: a thread with a job running, one with a command
// running, one whose mount serves requests and one a call touches are
// never closed, while an idle one with the same idle time is.
func TestBusyThreadsStay(t *testing.T) {
	t.Parallel()
	idleT, job, cmd, reqs, touched := key("idle"), key("job"), key("cmd"), key("reqs"), key("touched")
	set := meta.Settings{CloseIdleSeconds: 1}
	store := newStore(t, map[meta.ThreadKey]meta.Settings{idleT: set, job: set, cmd: set, reqs: set, touched: set})
	// The busy ones first: a look reaches them before the idle one.
	f := newFake(job, cmd, reqs, touched, idleT)
	f.jobs[job], f.runs[cmd], f.grow[reqs], f.touched[touched] = true, true, true, true
	start(t, f, store, 0)

	f.waitClosed(t)
	// Past twice the idle time since the idle one's close.
	f.waitLooks(t, f.looksSoFar()+5)
	if cs := f.closeCalls(); len(cs) != 1 || cs[0].k != idleT {
		t.Errorf("closes: %+v, want only %v", cs, idleT)
	}
}

// TestFailedCloseWaitsAnIdleTime: a close that fails is tried again
// after another idle time, not at the next look.
func TestFailedCloseWaitsAnIdleTime(t *testing.T) {
	t.Parallel()
	k := key("t")
	store := newStore(t, map[meta.ThreadKey]meta.Settings{k: {CloseIdleSeconds: 1}})
	f := newFake(k)
	f.closeErr = errors.New("busy")
	start(t, f, store, 0)

	f.waitClosed(t)
	// The look that closed (L, counted from 1) is the last to begin
	// with no close.
	f.waitLooks(t, f.looksSoFar()+1)
	f.mu.Lock()
	l := slices.IndexFunc(f.closesAt, func(n int) bool { return n > 0 })
	f.mu.Unlock()
	// The look after it (500 ms later, less than the idle time) has
	// ended once look L+2 began.
	f.waitLooks(t, l+2)
	f.mu.Lock()
	atNext := f.closesAt[l+1]
	f.mu.Unlock()
	if atNext != 1 {
		t.Errorf("closes by the end of the look after the failed one: %d, want 1 (no retry before another idle time)", atNext)
	}
	// Then it is tried again.
	for deadline := time.Now().Add(30 * time.Second); len(f.closeCalls()) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the failed close was not tried again in 30s")
		}
		f.waitLooks(t, f.looksSoFar()+1)
	}
}

// TestCloseStopsAndWaits: Close returns only once a look under way ended
// and the goroutine stopped; nothing is called after it.
func TestCloseStopsAndWaits(t *testing.T) {
	k := key("t")
	store := newStore(t, map[meta.ThreadKey]meta.Settings{k: {CloseIdleSeconds: 1}})
	ignore := goleak.IgnoreCurrent() // the store's
	f := newFake(k)
	f.hold, f.entered = make(chan struct{}), make(chan struct{})
	hold, entered := f.hold, f.entered
	r := idle.Start(idle.Config{Threads: f, Jails: f, Jobs: f, Store: store, Logger: hclog.NewNullLogger()})

	<-entered // a look under way, held
	closeDone := make(chan bool)
	go func() {
		r.Close()
		f.mu.Lock()
		in := f.inLook
		f.stopped = true
		f.mu.Unlock()
		closeDone <- in
	}()
	select {
	case <-closeDone:
		t.Fatal("Close returned while a look was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(hold)
	if in := <-closeDone; in {
		t.Error("Close returned while the look was still under way")
	}
	goleak.VerifyNone(t, ignore)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lateCall != "" {
		t.Errorf("%s called after Close returned", f.lateCall)
	}
}
