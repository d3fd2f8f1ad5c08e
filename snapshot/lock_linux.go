package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The repository's lock is flock(2) on DIR/lock, taken on an open file
// description of its own per call (flock locks belong to the open file
// description), so it works alike between processes sharing the folder
// and between goroutines of one. It is held shared by every checkpoint,
// restore or fork from its first object read or write until its record
// is stored (Shared), and exclusive by Collect for each of its short
// sweeps (tryExclusive).
//
// The collector never queues in front of Shared callers: it asks with
// LOCK_NB and, refused, asks again after a pause, so a new checkpoint
// never waits behind a collection that waits for a slow one to end. It
// waits only while a sweep holds the lock, and a sweep is bounded
// (collectHold). The price is that a stream of overlapping Shared
// holders that never leaves the lock free delays the sweep (never its
// safety): the collection waits until they leave a gap, or ctx ends.
// (Older versions also took DIR/gate, a turnstile that made new Shared
// callers wait behind a waiting collection; it is no longer used. Their
// collections stay safe beside this version's Shared, and the reverse,
// since both exclude on DIR/lock.)
//
// A blocking flock cannot be canceled, so Shared asks with LOCK_NB too,
// again after a backoff (lockPollMin doubling up to lockPollMax), until
// granted or ctx ends. The collector polls faster (up to collectPollMax),
// to catch the short gaps between overlapping checkpoints: a try is one
// system call. A holder that dies releases its lock with its descriptor.
const (
	lockName       = "lock"
	lockPollMin    = time.Millisecond
	lockPollMax    = 25 * time.Millisecond
	collectPollMax = 5 * time.Millisecond
)

// Shared takes the repository's lock shared, waiting while a collection
// sweeps (for at most about collectHold), until ctx ends. Checkpoints,
// restores and forks hold it from their first object read or write until
// their record is stored; a collection's sweep then sees their record,
// or they find none of the objects it removed in place (and write them
// again). Call unlock (once) to release it.
func (r *Repo) Shared(ctx context.Context) (unlock func(), err error) {
	lock, err := r.flock(ctx, lockName, unix.LOCK_SH, lockPollMax)
	if err != nil {
		return nil, fmt.Errorf("snapshot: lock shared: %w", err)
	}
	return sync.OnceFunc(func() { lock.Close() }), nil
}

// tryExclusive takes the lock exclusive for a sweep of Collect. It asks
// without waiting in line (LOCK_NB, so it keeps no Shared caller out
// while it waits) and asks again after a backoff until granted or ctx
// ends.
func (r *Repo) tryExclusive(ctx context.Context) (unlock func(), err error) {
	lock, err := r.flock(ctx, lockName, unix.LOCK_EX, collectPollMax)
	if err != nil {
		return nil, fmt.Errorf("snapshot: lock exclusive: %w", err)
	}
	return sync.OnceFunc(func() { lock.Close() }), nil
}

// flock opens the file name of the repository anew and flocks it with
// how (LOCK_SH or LOCK_EX), polling with LOCK_NB (the pause doubling
// from lockPollMin up to pollMax) until granted or ctx ends. Closing the file releases the lock. A LOCK_NB request is never
// queued by the kernel: a waiting exclusive request keeps no shared one
// out, nor the reverse.
func (r *Repo) flock(ctx context.Context, name string, how int, pollMax time.Duration) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(r.dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	fd := int(f.Fd())
	wait := lockPollMin
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", name, err)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			f.Close()
			return nil, fmt.Errorf("wait for %s: %w", name, err)
		}
		wait = min(2*wait, pollMax)
	}
}
