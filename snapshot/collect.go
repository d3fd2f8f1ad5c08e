package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// CollectStats says what a Collect did.
type CollectStats struct {
	Kept      int64         // objects kept
	Removed   int64         // objects removed
	Freed     int64         // bytes of the objects removed
	Temps     int64         // stale files removed from tmp/
	Recovered int64         // logs left by crashed processes, spread
	Duration  time.Duration // from the lock granted to the end
}

// Collect removes every object that no tree reachable from the roots live
// returns references. It takes the repository's lock exclusive, waiting
// for every Shared holder (and keeping new ones waiting); waits until this
// Repo's logs are spread and spreads those that crashed processes left;
// calls live, marks everything reachable from the roots, visiting each
// tree once, then removes the rest and the stale files of tmp/. The
// objects of the logs of other live processes are not loose yet: they are
// all kept, and so are those of a log of this Repo's that its spreader
// fails to spread.
//
// It fails closed: if live fails, or a root's tree or any tree below it
// is missing or corrupt, it removes nothing. (Blobs are not read: a
// missing one is not noticed here.) A zero root is the empty tree. If ctx
// ends during the sweep, the objects removed so far stay removed (they
// were unreachable) and the error says so.
func (r *Repo) Collect(ctx context.Context, live func(ctx context.Context) ([]Hash, error)) (CollectStats, error) {
	unlock, err := r.exclusive(ctx)
	if err != nil {
		return CollectStats{}, fmt.Errorf("snapshot: collect: %w", err)
	}
	defer unlock()
	start := time.Now()
	// No build runs now, here or in another process (they hold Shared),
	// so no log is added until the end; the spreaders go on.
	if err := r.waitSpread(ctx); err != nil && ctx.Err() != nil {
		return CollectStats{}, fmt.Errorf("snapshot: collect: wait for the spreader: %w", err)
	}
	recovered, err := r.recoverLogs()
	if err != nil {
		return CollectStats{}, fmt.Errorf("snapshot: collect: %w", err)
	}
	keep, err := r.otherHashes()
	if err != nil {
		return CollectStats{}, fmt.Errorf("snapshot: collect: %w", err)
	}
	r.mu.Lock()
	for _, pl := range r.logs {
		for h := range pl.recs {
			keep[h] = struct{}{}
		}
	}
	r.mu.Unlock()
	roots, err := live(ctx)
	if err != nil {
		return CollectStats{}, fmt.Errorf("snapshot: collect: live roots: %w", err)
	}
	marked := make(map[Hash]struct{})
	for _, root := range roots {
		if err := r.mark(ctx, root, marked); err != nil {
			return CollectStats{}, fmt.Errorf("snapshot: collect: root %s: %w", root, err)
		}
	}
	stats, err := r.sweep(ctx, marked, keep)
	stats.Recovered = int64(recovered)
	stats.Duration = time.Since(start)
	if err != nil {
		return stats, fmt.Errorf("snapshot: collect: %w", err)
	}
	n, err := r.removeStaleTemps()
	stats.Temps = int64(n)
	stats.Duration = time.Since(start)
	if err != nil {
		return stats, fmt.Errorf("snapshot: collect: %w", err)
	}
	return stats, nil
}

// mark adds the tree h, and everything it references, to marked. A tree
// marked already is not read again: subtrees shared by several roots, or
// several times in one, are visited once.
func (r *Repo) mark(ctx context.Context, h Hash, marked map[Hash]struct{}) error {
	if h.IsZero() {
		return nil
	}
	if _, ok := marked[h]; ok {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	obj, err := r.tree(h)
	if err != nil {
		return err
	}
	marked[h] = struct{}{}
	for _, e := range obj.entries {
		if e.Kind == KindDir {
			if err := r.mark(ctx, e.Hash, marked); err != nil {
				return err
			}
		} else {
			refs, err := r.FileObjects(e)
			if err != nil {
				return err
			}
			for _, h := range refs {
				marked[h] = struct{}{}
			}
		}
	}
	return nil
}

// sweep removes every object in neither marked nor keep. Files in the
// fan-out folders whose names are not object names are left alone.
func (r *Repo) sweep(ctx context.Context, marked, keep map[Hash]struct{}) (CollectStats, error) {
	var stats CollectStats
	for i := 0; i < 256; i++ {
		if err := ctx.Err(); err != nil {
			return stats, fmt.Errorf("sweep stopped: %w", err)
		}
		folder := fmt.Sprintf("%s/%02x", r.objects, i)
		ents, err := os.ReadDir(folder)
		if err != nil {
			return stats, fmt.Errorf("sweep: list %s: %w", folder, err)
		}
		for _, e := range ents {
			h, err := ParseHash(fmt.Sprintf("%02x%s", i, e.Name()))
			if err != nil {
				continue
			}
			_, ok := marked[h]
			if _, pending := keep[h]; ok || pending {
				stats.Kept++
				continue
			}
			var size int64
			if info, err := e.Info(); err == nil {
				size = info.Size()
			}
			err = os.Remove(folder + "/" + e.Name())
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return stats, fmt.Errorf("sweep: remove object %s: %w", h, err)
			}
			r.trees.drop(h)
			if err == nil {
				stats.Removed++
				stats.Freed += size
			}
		}
	}
	return stats, nil
}
