package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Crash recovery. A log in tmp/ that nobody holds locked was left by a
// process that ended without spreading it (a crash, a kill, a failed last
// pass at Close): its owner held its lock from before its first record
// until it removed it. recoverLogs spreads such logs, holding their
// locks, so that no other process spreads one at the same time. A log
// whose lock is held belongs to a live process (or one recovering it)
// and is left alone.

// recoverLogs spreads and removes the logs of tmp/ that no live process
// holds, and returns how many.
func (r *Repo) recoverLogs() (int, error) {
	names, err := listTmp(r.tmp)
	if err != nil {
		return 0, err
	}
	type taken struct {
		name string
		f    *os.File
	}
	var done []taken
	defer func() {
		for _, t := range done {
			t.f.Close()
		}
	}()
	var ds durableSet
	for _, name := range names {
		if !isLogName(name) {
			continue
		}
		path := filepath.Join(r.tmp, name)
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("open log %s: %w", name, err)
		}
		ok, err := lockedAsNamed(f, path)
		if err != nil || !ok {
			f.Close()
			if err != nil {
				return 0, fmt.Errorf("lock log %s: %w", name, err)
			}
			continue // a live process's
		}
		info, err := f.Stat()
		if err != nil || !info.Mode().IsRegular() {
			f.Close()
			if err != nil {
				return 0, fmt.Errorf("stat log %s: %w", name, err)
			}
			continue // not one of ours; left alone
		}
		done = append(done, taken{name, f})
		if _, err := r.spreadLog(f, info.Size(), true, &ds); err != nil {
			return 0, fmt.Errorf("recover log %s: %w", name, err)
		}
	}
	if err := r.makeDurable(&ds); err != nil {
		return 0, fmt.Errorf("recover logs: %w", err)
	}
	for _, t := range done {
		if err := os.Remove(filepath.Join(r.tmp, t.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("remove recovered log %s: %w", t.name, err)
		}
	}
	return len(done), nil
}
