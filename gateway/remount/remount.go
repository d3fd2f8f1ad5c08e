// Package remount is the work a gateway's start leaves to do per thread
// once the API serves: mounting again the threads its former run served,
// finishing the checkpoint restores a crash cut short. A Queue owns that
// work's list and the goroutines that do it in the background, a bounded
// number at a time; a caller that needs one thread at once takes that
// thread's work out of the queue (Take) and does it itself, so that no
// call waits for the whole restore, only, at most, for its own thread.
//
// # What it promises
//
//   - Every key given to New is handed out exactly once: to a worker,
//     through Config.Run, or to a caller of Take, whichever asks first.
//     Run and the callers of Take say whether they took it (Take under the
//     caller's own exclusion: the gateway holds the thread's lock), so a
//     key is never worked on twice, and never by two at once.
//   - At most Config.Parallel workers run at once; they take the keys in
//     the order New was given them.
//   - Left counts the keys not yet done: not yet taken, or taken and not
//     yet done (the done func that Take returns). Done is closed once it
//     reaches zero, or once Close ran.
//   - Stop tells the workers to take no more keys and cancels their
//     runs' context, without waiting; Close stops the workers (cancelling the context Run gets), waits
//     for them, and returns once none runs. Keys not yet taken stay
//     pending: a later Take still hands them out. Close may be called
//     twice.
//
// # Goroutines
//
// A Queue owns its workers, started by Start and waited for by Close
// (which may also run without Start). The
// callers of Take do their work in their own goroutines.
//
// # Lock
//
// Queue.mu guards the pending set and the count of keys left; it is a
// leaf, held only over map work, never across Run or a caller's work.
package remount

import (
	"context"
	"sync"
)

// Config says what a Queue does.
type Config[K comparable] struct {
	// Run does the work of one key, in a worker. It must call Take(k)
	// (under whatever exclusion the caller's own calls of Take use) and do
	// the work only if Take says it was still pending, calling the done
	// func after it: a caller may have taken k meanwhile.
	Run func(ctx context.Context, k K)
	// Parallel bounds the workers; zero or less means one.
	Parallel int
	// Gate, if not nil, holds every worker until it is closed (or Close
	// runs): for tests that look at the state before the background work
	// starts. Take is not held.
	Gate <-chan struct{}
}

// Queue is the background work of a start. New makes one and Start starts
// its workers; call Close when finished.
type Queue[K comparable] struct {
	cfg    Config[K]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// next hands the keys to the workers, in order; never changed.
	next chan K

	mu sync.Mutex
	// pending holds the keys not yet taken.
	pending map[K]struct{}
	// left counts the keys not yet done; done is closed when it reaches
	// zero or at Close (doneOnce).
	left     int
	done     chan struct{}
	doneOnce sync.Once
}

// New returns the background work of keys (duplicates count once), not
// yet started: Take works at once, the workers run from Start. Keeping
// the Queue where Config.Run finds it before Start saves a race.
func New[K comparable](keys []K, cfg Config[K]) *Queue[K] {
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue[K]{
		cfg:     cfg,
		ctx:     ctx,
		cancel:  cancel,
		next:    make(chan K, len(keys)),
		pending: make(map[K]struct{}, len(keys)),
		done:    make(chan struct{}),
	}
	for _, k := range keys {
		if _, dup := q.pending[k]; dup {
			continue
		}
		q.pending[k] = struct{}{}
		q.next <- k
	}
	close(q.next)
	q.left = len(q.pending)
	if q.left == 0 {
		q.closeDone()
	}
	return q
}

// Start starts the workers and returns at once. Call it once.
func (q *Queue[K]) Start() {
	for range max(q.cfg.Parallel, 1) {
		q.wg.Go(q.work)
	}
}

// work is one worker: it runs the keys still pending, in order, until
// none is left or Close.
func (q *Queue[K]) work() {
	if q.cfg.Gate != nil {
		select {
		case <-q.cfg.Gate:
		case <-q.ctx.Done():
			return
		}
	}
	for k := range q.next {
		if q.ctx.Err() != nil {
			return
		}
		if !q.Pending(k) {
			continue // a caller took it
		}
		q.cfg.Run(q.ctx, k)
	}
}

// Take takes k's work if it is still pending: ok says so, and the caller
// then does it and calls done once it is done. A key taken already (by a
// worker or another caller), or never given, is not pending: ok is false.
func (q *Queue[K]) Take(k K) (done func(), ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.pending[k]; !ok {
		return nil, false
	}
	delete(q.pending, k)
	var once sync.Once
	return func() { once.Do(q.finish) }, true
}

// finish counts one key done.
func (q *Queue[K]) finish() {
	q.mu.Lock()
	q.left--
	last := q.left == 0
	q.mu.Unlock()
	if last {
		q.closeDone()
	}
}

// Pending reports whether k's work is still to be taken.
func (q *Queue[K]) Pending(k K) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.pending[k]
	return ok
}

// Left returns how many keys are not yet done.
func (q *Queue[K]) Left() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.left
}

// Done is closed once every key is done, or once Close ran.
func (q *Queue[K]) Done() <-chan struct{} { return q.done }

// Stop tells the workers to take no more keys and cancels the context
// their runs got; it does not wait (Close does).
func (q *Queue[K]) Stop() { q.cancel() }

// Close stops the workers and waits for them.
func (q *Queue[K]) Close() {
	q.cancel()
	q.wg.Wait()
	q.closeDone()
}

func (q *Queue[K]) closeDone() { q.doneOnce.Do(func() { close(q.done) }) }
