package image

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// flights runs one piece of work per key at a time, for any number of
// callers: concurrent pulls of one reference resolve it once, and pulls
// of one image (by any reference, or a Load) download and unpack it once.
//
// It is golang.org/x/sync/singleflight with two things that package does
// not have: the work runs under a context of its own, ended when the last
// caller has gone (with singleflight the first caller's cancel would fail
// every caller that joined it), and every caller gets the work's progress
// frames, not only the first.
//
// The work goroutines belong to the Store: they run under its context
// (Close ends them) and its WaitGroup (Close waits for them).
type flights[T any] struct {
	mu sync.Mutex
	m  map[string]*flight[T] // guarded by mu
}

type flight[T any] struct {
	done   chan struct{} // closed once val and err are set
	val    T
	err    error
	cancel context.CancelFunc

	// waiters is the number of callers waiting; guarded by flights.mu.
	waiters int

	// pmu serialises the progress frames and guards subs, next and thr: a
	// caller removed from subs under pmu is never called again.
	pmu  sync.Mutex
	subs map[int]func(Progress)
	next int
	thr  throttle
	// pending is the newest frame the throttle held back, sent when its
	// interval is up (timer) unless a newer frame went first: a pull
	// that stalls still shows where it stalled.
	pending *Progress
	timer   *time.Timer
}

// throttle lets through one progress frame per interval, and every
// forced one (the last of a phase). Its owner serialises the calls.
type throttle struct{ last time.Time }

// progressInterval is the least time between two progress frames: at most
// ~10 a second.
const progressInterval = 100 * time.Millisecond

func (t *throttle) pass(force bool) bool {
	now := time.Now()
	if !force && now.Sub(t.last) < progressInterval {
		return false
	}
	t.last = now
	return true
}

// do joins the flight for key, starting it with work when there is none,
// and waits for it or for ctx. progress (may be nil) gets the flight's
// frames until do returns; it must not block. s owns the goroutine.
func (g *flights[T]) do(ctx context.Context, s *Store, key string, progress func(Progress),
	work func(ctx context.Context, report func(p Progress, last bool)) (T, error)) (T, error) {
	var zero T
	g.mu.Lock()
	f := g.m[key]
	if f == nil {
		wctx, cancel, ok := s.workContext()
		if !ok {
			g.mu.Unlock()
			return zero, errClosed
		}
		f = &flight[T]{done: make(chan struct{}), cancel: cancel, subs: map[int]func(Progress){}}
		if g.m == nil {
			g.m = map[string]*flight[T]{}
		}
		g.m[key] = f
		// The caller that starts the work hears from its first frame:
		// subscribed before the work can report anything.
		id := f.subscribe(progress)
		defer f.unsubscribe(id)
		progress = nil
		go func() {
			defer s.wg.Done()
			defer cancel()
			val, err := work(wctx, f.report)
			g.mu.Lock()
			if g.m[key] == f {
				delete(g.m, key)
			}
			f.val, f.err = val, err
			g.mu.Unlock()
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()

	id := f.subscribe(progress)
	defer f.unsubscribe(id)
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			// The last caller gone: the work stops, and a new caller
			// starts afresh rather than joining work being ended.
			f.cancel()
			if g.m[key] == f {
				delete(g.m, key)
			}
		}
		g.mu.Unlock()
		return zero, fmt.Errorf("image: %w", context.Cause(ctx))
	}
}

func (f *flight[T]) subscribe(fn func(Progress)) int {
	if fn == nil {
		return -1
	}
	f.pmu.Lock()
	defer f.pmu.Unlock()
	f.next++
	f.subs[f.next] = fn
	return f.next
}

func (f *flight[T]) unsubscribe(id int) {
	if id < 0 {
		return
	}
	f.pmu.Lock()
	defer f.pmu.Unlock()
	delete(f.subs, id)
}

// report hands p to every caller, throttled; last marks a frame that
// always goes (the end of a phase).
func (f *flight[T]) report(p Progress, last bool) {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	if !f.thr.pass(last) {
		f.pending = &p
		if f.timer == nil {
			f.timer = time.AfterFunc(progressInterval, f.flush)
		}
		return
	}
	f.pending = nil
	for _, fn := range f.subs {
		fn(p)
	}
}

// flush sends the frame the throttle held back, if no newer one went.
func (f *flight[T]) flush() {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	f.timer = nil
	if f.pending == nil {
		return
	}
	p := *f.pending
	f.pending = nil
	f.thr.last = time.Now()
	for _, fn := range f.subs {
		fn(p)
	}
}
