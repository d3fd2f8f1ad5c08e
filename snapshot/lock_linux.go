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

// The repository's lock is flock(2) on two files, each taken on an open
// file description of its own per call (flock locks belong to the open
// file description), so it works alike between processes sharing the
// folder and between goroutines of one:
//
//   - lock: held shared by every checkpoint, restore or fork from its
//     first object read or write until its record is stored (Shared), and
//     exclusive by Collect.
//   - gate: a turnstile that keeps a stream of overlapping Shared holders
//     from starving Collect. Collect holds it exclusive from before it
//     asks for lock until it is done; Shared takes it shared only while
//     it asks for lock. So once a collection waits, new Shared callers
//     wait behind it, the current holders finish, and it runs.
//
// A blocking flock cannot be canceled, so both are asked with LOCK_NB and
// asked again after a backoff (lockPollMin doubling up to lockPollMax)
// until they are granted or ctx ends. A holder that dies releases its
// lock with its descriptors.
const (
	lockName    = "lock"
	gateName    = "gate"
	lockPollMin = time.Millisecond
	lockPollMax = 25 * time.Millisecond
)

// Shared takes the repository's lock shared, waiting while a collection
// runs or waits to run, until ctx ends. Checkpoints, restores and forks
// hold it from their first object read or write until their record is
// stored; a collection then sees their record, or finds none of their
// objects gone. Call unlock (once) to release it.
func (r *Repo) Shared(ctx context.Context) (unlock func(), err error) {
	gate, err := r.flock(ctx, gateName, unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("snapshot: lock shared: %w", err)
	}
	defer gate.Close()
	lock, err := r.flock(ctx, lockName, unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("snapshot: lock shared: %w", err)
	}
	return sync.OnceFunc(func() { lock.Close() }), nil
}

// exclusive takes the gate then the lock exclusive, for Collect.
func (r *Repo) exclusive(ctx context.Context) (unlock func(), err error) {
	gate, err := r.flock(ctx, gateName, unix.LOCK_EX)
	if err != nil {
		return nil, fmt.Errorf("snapshot: lock exclusive: %w", err)
	}
	lock, err := r.flock(ctx, lockName, unix.LOCK_EX)
	if err != nil {
		gate.Close()
		return nil, fmt.Errorf("snapshot: lock exclusive: %w", err)
	}
	return sync.OnceFunc(func() {
		lock.Close()
		gate.Close()
	}), nil
}

// flock opens the file name of the repository anew and flocks it with
// how (LOCK_SH or LOCK_EX), polling until granted or ctx ends. Closing
// the file releases the lock.
func (r *Repo) flock(ctx context.Context, name string, how int) (*os.File, error) {
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
		wait = min(2*wait, lockPollMax)
	}
}
