// Package keyed hands out one lock per key (Locks): the threads' locks
// and turn locks (package threads) and the tenants' snapshot quota locks
// (package checkpoints). It keeps no state of the daemon's; a Locks is
// owned by the room that holds it.
package keyed

import (
	"context"
	"fmt"
	"sync"
)

// Locks hands out one lock per key, created on first use and dropped
// when nobody holds or waits for it, so a thousand idle threads cost no
// memory and no global lock is held while a thread mounts. The zero value is
// ready to use.
type Locks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*entry // entries live while refs > 0
}

type entry struct {
	// ch holds one token while the lock is held; a channel rather than a
	// sync.Mutex so that waiting can be cancelled by ctx.
	ch chan struct{}
	// refs counts holders and waiters; guarded by Locks.mu.
	refs int
}

// Lock takes the lock of key, waiting until it is free or ctx is done. On
// success the caller must call the returned unlock exactly once.
func (k *Locks[K]) Lock(ctx context.Context, key K) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[K]*entry)
	}
	l := k.locks[key]
	if l == nil {
		l = &entry{ch: make(chan struct{}, 1)}
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
func (k *Locks[K]) release(key K, l *entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.refs--
	if l.refs == 0 {
		delete(k.locks, key)
	}
}

// Size returns how many locks are held or waited for.
func (k *Locks[K]) Size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
