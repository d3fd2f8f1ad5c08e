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
	Sweeps    int64         // times the lock was held exclusive
	Held      time.Duration // how long it was held, all sweeps together
	Duration  time.Duration // from the start to the end
}

// collectHold bounds the removals of one sweep: a Shared caller that
// arrives while a sweep holds the lock waits about this long at most,
// plus the sweep's listing of the live roots and marking of the new
// ones, plus one poll (lockPollMax). A collection with more to remove
// lets go of the lock and asks for it again.
const collectHold = 20 * time.Millisecond

// Collect removes every object that no tree reachable from the roots live
// returns references, without ever making a Shared caller wait behind
// it, other than for a bounded sweep.
//
// It works in two phases. Without the lock, beside checkpoints: it waits
// until this Repo's logs are spread, spreads those that crashed processes
// left, calls live, marks everything reachable from the roots (visiting
// each tree once) and lists the loose objects that are not marked: the
// candidates. Then in sweeps, each holding the lock exclusive (asked for
// without waiting in line: tryExclusive), so that no checkpoint, restore
// or fork is between its first object use and its record: it calls live
// again, marks what the roots added since reach, keeps every object a
// log holds (this Repo's not yet spread, and other processes'), and
// removes the other candidates, for collectHold at most; then lets go
// and, with candidates left, sweeps again. So an object is removed only
// while no Shared holder is under way and when no root, listed in that
// very sweep, reaches it: a checkpoint that found it in place before
// the sweep has stored its record (and its root is marked), one that
// looks after finds it gone and writes it again.
//
// It fails closed: if live fails, or a root's tree or any tree below it
// is missing or corrupt, it removes nothing more. (Blobs are not read: a
// missing one is not noticed here.) A zero root is the empty tree. If
// ctx ends, the objects removed so far stay removed (they were
// unreachable) and the error says so.
func (r *Repo) Collect(ctx context.Context, live func(ctx context.Context) ([]Hash, error)) (CollectStats, error) {
	start := time.Now()
	c := &collection{r: r, live: live, marked: make(map[Hash]struct{})}
	done := func(err error) (CollectStats, error) {
		c.stats.Duration = time.Since(start)
		if err != nil {
			return c.stats, fmt.Errorf("snapshot: collect: %w", err)
		}
		return c.stats, nil
	}
	if err := r.waitSpread(ctx); err != nil && ctx.Err() != nil {
		return done(fmt.Errorf("wait for the spreader: %w", err))
	}
	recovered, err := r.recoverLogs()
	c.stats.Recovered = int64(recovered)
	if err != nil {
		return done(err)
	}
	if err := c.markLive(ctx); err != nil {
		return done(err)
	}
	listed, err := c.listCandidates(ctx)
	if err != nil {
		return done(err)
	}
	c.stats.Kept = listed - int64(len(c.cands))
	for len(c.cands) > 0 {
		c.step("wait")
		unlock, err := r.tryExclusive(ctx)
		if err != nil {
			return done(err)
		}
		held := time.Now()
		c.step("sweep")
		err = c.sweep(ctx)
		unlock()
		c.stats.Sweeps++
		c.stats.Held += time.Since(held)
		if err != nil {
			return done(err)
		}
	}
	n, err := r.removeStaleTemps()
	c.stats.Temps = int64(n)
	return done(err)
}

// collection is one Collect's state: what it marked so far, the
// candidates it has yet to sweep, its figures. One goroutine uses it.
type collection struct {
	r      *Repo
	live   func(ctx context.Context) ([]Hash, error)
	marked map[Hash]struct{}
	cands  []Hash
	stats  CollectStats
}

// step calls the repository's collect hook, if any, with step: "wait"
// before each sweep asks for the lock, "sweep" once it holds it.
func (c *collection) step(step string) {
	if c.r.collectHook != nil {
		c.r.collectHook(step)
	}
}

// markLive calls live and marks everything its roots reach that is not
// marked already.
func (c *collection) markLive(ctx context.Context) error {
	roots, err := c.live(ctx)
	if err != nil {
		return fmt.Errorf("live roots: %w", err)
	}
	for _, root := range roots {
		if err := c.mark(ctx, root); err != nil {
			return fmt.Errorf("root %s: %w", root, err)
		}
	}
	return nil
}

// mark adds the tree h, and everything it references, to marked. A tree
// marked already is not read again: subtrees shared by several roots, or
// several times in one, are visited once. (A tree is marked before its
// entries, so a mark that fails leaves marked holding trees whose
// entries are not; the caller then stops.)
func (c *collection) mark(ctx context.Context, h Hash) error {
	if h.IsZero() {
		return nil
	}
	if _, ok := c.marked[h]; ok {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	obj, err := c.r.tree(h)
	if err != nil {
		return err
	}
	c.marked[h] = struct{}{}
	for _, e := range obj.entries {
		if e.Kind == KindDir {
			if err := c.mark(ctx, e.Hash); err != nil {
				return err
			}
		} else {
			refs, err := c.r.FileObjects(e)
			if err != nil {
				return err
			}
			for _, h := range refs {
				c.marked[h] = struct{}{}
			}
		}
	}
	return nil
}

// listCandidates lists the loose objects not marked, in the order of
// their folders, as the candidates, and returns how many objects it
// listed in all. Files in the fan-out folders whose names are not object
// names are left alone.
func (c *collection) listCandidates(ctx context.Context) (int64, error) {
	var listed int64
	for i := 0; i < 256; i++ {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("list objects: %w", err)
		}
		folder := fmt.Sprintf("%s/%02x", c.r.objects, i)
		d, err := os.Open(folder)
		if err != nil {
			return 0, fmt.Errorf("list %s: %w", folder, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return 0, fmt.Errorf("list %s: %w", folder, err)
		}
		for _, name := range names {
			h, err := ParseHash(fmt.Sprintf("%02x%s", i, name))
			if err != nil {
				continue
			}
			listed++
			if _, ok := c.marked[h]; !ok {
				c.cands = append(c.cands, h)
			}
		}
	}
	return listed, nil
}

// sweep is one sweep of Collect; the caller holds the lock exclusive. It
// marks what the roots live returns now reach, keeps what the logs hold,
// and removes the other candidates for collectHold at most, leaving in
// cands those it did not come to.
func (c *collection) sweep(ctx context.Context) error {
	// Every checkpoint that used an object before now stored its record
	// before it let go of Shared: its root is among these.
	if err := c.markLive(ctx); err != nil {
		return err
	}
	r := c.r
	keep, err := r.otherHashes()
	if err != nil {
		return err
	}
	r.mu.Lock()
	for _, pl := range r.logs {
		for h := range pl.recs {
			keep[h] = struct{}{}
		}
	}
	r.mu.Unlock()
	end := time.Now().Add(collectHold)
	for i, h := range c.cands {
		if i%32 == 0 && i > 0 {
			if err := ctx.Err(); err != nil {
				c.cands = c.cands[i:]
				return fmt.Errorf("sweep stopped: %w", err)
			}
			if time.Now().After(end) {
				c.cands = c.cands[i:]
				return nil
			}
		}
		_, ok := c.marked[h]
		if _, pending := keep[h]; ok || pending {
			c.stats.Kept++
			continue
		}
		path := r.objectPath(h)
		var size int64
		if info, err := os.Lstat(path); err == nil {
			size = info.Size()
		}
		err := os.Remove(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			c.cands = c.cands[i:]
			return fmt.Errorf("sweep: remove object %s: %w", h, err)
		}
		r.trees.drop(h)
		if err == nil {
			c.stats.Removed++
			c.stats.Freed += size
		}
	}
	c.cands = nil
	return nil
}
