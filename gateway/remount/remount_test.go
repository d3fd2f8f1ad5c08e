package remount

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// recorder is a Run that takes its key under mu, as the gateway takes it
// under the thread's lock, and counts who did each key.
type recorder struct {
	q *Queue[int]

	mu  sync.Mutex
	did map[int]int // key: how many times its work ran

	inFlight, most atomic.Int32
	hold           chan struct{} // if not nil, each run waits for it
}

func (r *recorder) run(ctx context.Context, k int) {
	done, ok := r.q.Take(k)
	if !ok {
		return
	}
	defer done()
	n := r.inFlight.Add(1)
	for {
		m := r.most.Load()
		if n <= m || r.most.CompareAndSwap(m, n) {
			break
		}
	}
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
		}
	}
	r.inFlight.Add(-1)
	r.mu.Lock()
	r.did[k]++
	r.mu.Unlock()
}

func start(t *testing.T, keys []int, parallel int, gate, hold chan struct{}) *recorder {
	t.Helper()
	r := &recorder{did: make(map[int]int), hold: hold}
	r.q = New(keys, Config[int]{Run: r.run, Parallel: parallel, Gate: gate})
	r.q.Start()
	t.Cleanup(r.q.Close)
	return r
}

func TestEveryKeyOnce(t *testing.T) {
	keys := make([]int, 500)
	for i := range keys {
		keys[i] = i % 400 // 100 duplicates
	}
	gate := make(chan struct{})
	r := start(t, keys, 8, gate, nil)
	if got := r.q.Left(); got != 400 {
		t.Errorf("Left before the gate opens: got %d, want 400", got)
	}
	// Callers take some keys while the workers are held, and more while
	// they run.
	var callers sync.WaitGroup
	for k := range 50 {
		if done, ok := r.q.Take(k); ok {
			r.mu.Lock()
			r.did[k]++
			r.mu.Unlock()
			done()
			done() // a second call counts once
		}
	}
	close(gate)
	for k := 50; k < 400; k += 7 {
		callers.Go(func() { r.run(context.Background(), k) })
	}
	callers.Wait()
	<-r.q.Done()
	if got := r.q.Left(); got != 0 {
		t.Errorf("Left when done: got %d, want 0", got)
	}
	for k := range 400 {
		if got := r.did[k]; got != 1 {
			t.Errorf("key %d: done %d times, want once", k, got)
		}
	}
	if _, ok := r.q.Take(3); ok {
		t.Errorf("Take of a key done: got ok, want not pending")
	}
}

func TestParallelBound(t *testing.T) {
	keys := make([]int, 64)
	for i := range keys {
		keys[i] = i
	}
	hold := make(chan struct{})
	r := start(t, keys, 4, nil, hold)
	// Every worker is held in its run: exactly the bound run at once.
	for r.inFlight.Load() < 4 {
		// Wait for the workers to reach their runs; they cannot pass
		// hold, so the count only grows to the bound.
		select {
		case <-r.q.Done():
			t.Fatal("done while held")
		default:
		}
		runtime.Gosched()
	}
	close(hold)
	<-r.q.Done()
	if got := r.most.Load(); got != 4 {
		t.Errorf("most runs at once: got %d, want 4", got)
	}
}

func TestTakeWhileGated(t *testing.T) {
	gate := make(chan struct{})
	r := start(t, []int{1, 2, 3}, 2, gate, nil)
	// A caller is never held by the gate: its own key is its own.
	done, ok := r.q.Take(2)
	if !ok {
		t.Fatal("Take of a pending key: not ok")
	}
	if r.q.Pending(2) {
		t.Error("Pending after Take: got true")
	}
	if got := r.q.Left(); got != 3 {
		t.Errorf("Left with one taken, not done: got %d, want 3", got)
	}
	done()
	if got := r.q.Left(); got != 2 {
		t.Errorf("Left with one done: got %d, want 2", got)
	}
	close(gate)
	<-r.q.Done()
	if r.did[2] != 0 || r.did[1] != 1 || r.did[3] != 1 {
		t.Errorf("got runs %v, want 1 and 3 by the workers, 2 by the caller", r.did)
	}
}

func TestCloseStopsWorkers(t *testing.T) {
	gate := make(chan struct{})
	r := start(t, []int{1, 2}, 2, gate, nil)
	r.q.Close() // returns although the gate never opens
	select {
	case <-r.q.Done():
	default:
		t.Error("Done not closed after Close")
	}
	// What was not taken is still pending for a caller.
	if _, ok := r.q.Take(1); !ok {
		t.Error("Take after Close: got not pending")
	}
	r.q.Close()
}

func TestEmpty(t *testing.T) {
	r := start(t, nil, 3, nil, nil)
	<-r.q.Done()
	if got := r.q.Left(); got != 0 {
		t.Errorf("Left: got %d, want 0", got)
	}
}
