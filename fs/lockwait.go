package fs

import (
	"context"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// A lock wait (F_SETLKW, F_OFD_SETLKW, flock without LOCK_NB) that a mount
// serves is polled with the non-blocking call, never made as the blocking
// one. The blocking call would hold an OS thread of the daemon in the
// kernel for as long as the lock is held by someone else: an agent that
// starts a thousand processes waiting on one lock would cost the daemon a
// thousand OS threads, and a few such agents would take it past the Go
// runtime's thread limit, which kills the process with every thread's
// mount. Polled, a wait is a parked goroutine and a timer.
//
// The kernel interrupts a wait when the waiting process gets a signal (or
// dies): go-fuse then cancels the request's context, and the wait ends at
// once with EINTR, as the blocking call would.
//
// What polling gives up: a waiter may see the lock free some milliseconds
// after it was let go (lockPollMax at worst), and waiters are not served
// in order. POSIX promises neither; OFD and flock locks never detected
// deadlocks, and a process-associated lock on a FUSE file is served as an
// OFD lock of the open file anyway (go-fuse's loopback does so).
const (
	lockPollFirst = 500 * time.Microsecond
	lockPollMax   = 50 * time.Millisecond
)

// lockWaits counts the lock waits in progress, for a gauge.
type lockWaits struct{ n atomic.Int64 }

// waitLock takes the lock lk with try, the non-blocking call, until it is
// no longer refused as busy or ctx ends.
func (w *lockWaits) waitLock(ctx context.Context, try func() syscall.Errno) syscall.Errno {
	errno := try()
	if !lockBusy(errno) {
		return errno
	}
	if w != nil {
		w.n.Add(1)
		defer w.n.Add(-1)
	}
	delay := lockPollFirst
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return syscall.EINTR
		case <-t.C:
		}
		if errno = try(); !lockBusy(errno) {
			return errno
		}
		delay = min(2*delay, lockPollMax)
		t.Reset(delay)
	}
}

// lockBusy says a non-blocking lock call was refused because another
// holds a conflicting lock: fcntl says EAGAIN or EACCES, flock
// EWOULDBLOCK (EAGAIN on Linux).
func lockBusy(errno syscall.Errno) bool {
	return errno == syscall.EAGAIN || errno == syscall.EACCES
}

// Setlkw waits for the lock by polling (see above).
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.waits.waitLock(ctx, func() syscall.Errno {
		return h.LoopbackFile.Setlk(ctx, owner, lk, flags)
	})
}
