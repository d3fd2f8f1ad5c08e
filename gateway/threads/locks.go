package threads

import (
	"context"
	"fmt"
	"sync"
)

// keyedLocks hands out one lock per key, created on first use and dropped
// when nobody holds or waits for it, so a thousand idle threads cost no
// memory and no global lock is held while a thread mounts. The zero value is
// ready to use.
type keyedLocks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyedLock // entries live while refs > 0
}

type keyedLock struct {
	// ch holds one token while the lock is held; a channel rather than a
	// sync.Mutex so that waiting can be cancelled by ctx.
	ch chan struct{}
	// refs counts holders and waiters; guarded by keyedLocks.mu.
	refs int
}

// lock takes the lock of key, waiting until it is free or ctx is done. On
// success the caller must call the returned unlock exactly once.
func (k *keyedLocks[K]) lock(ctx context.Context, key K) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[K]*keyedLock)
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	select {
	case l.ch <- struct{}{}:
		return func() {
			<-l.ch
			k.release(key, l)
		}, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, fmt.Errorf("wait for the lock: %w", ctx.Err())
	}
}

// release drops one reference to l and forgets it when it was the last.
func (k *keyedLocks[K]) release(key K, l *keyedLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

// size returns how many locks are held or waited for; for tests.
func (k *keyedLocks[K]) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
