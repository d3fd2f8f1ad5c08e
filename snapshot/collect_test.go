package snapshot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func roots(hs ...Hash) func(context.Context) ([]Hash, error) {
	return func(context.Context) ([]Hash, error) { return hs, nil }
}

func TestCollect(t *testing.T) {
	r := openRepo(t)
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "shared/file"), "in both trees", 0o644)
	write(t, filepath.Join(b, "shared/file"), "in both trees", 0o644)
	write(t, filepath.Join(a, "only-a"), "only in a", 0o644)
	write(t, filepath.Join(b, "only-b"), "only in b", 0o644)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	before := len(objectFiles(t, r))

	// A live function that fails removes nothing.
	boom := errors.New("database down")
	if _, err := r.Collect(context.Background(), func(context.Context) ([]Hash, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Collect with a failing live: got %v, want %v", err, boom)
	}
	// A root that is missing removes nothing.
	if _, err := r.Collect(context.Background(), roots(hb, Hash{7})); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Collect with a missing root: got %v, want ErrNotFound", err)
	}
	if n := len(objectFiles(t, r)); n != before {
		t.Fatalf("after failed collections: %d objects, want %d", n, before)
	}

	// Drop a: its own blob and root go; the shared subtree stays.
	st, err := r.Collect(context.Background(), roots(hb, Hash{}))
	if err != nil {
		t.Fatal(err)
	}
	// a's root tree and its only-a blob
	if st.Removed != 2 || st.Kept != int64(before-2) || st.Freed <= 0 {
		t.Errorf("stats: got %+v, want 2 removed, %d kept, some bytes freed", st, before-2)
	}
	verifyAll(t, r, hb)
	if _, err := r.ReadTree(ha); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadTree of the collected root: got %v, want ErrNotFound", err)
	}
	// Everything else goes with no roots.
	if st, err := r.Collect(context.Background(), roots()); err != nil || st.Kept != 0 {
		t.Errorf("Collect with no roots: got %+v, %v; want nothing kept", st, err)
	}
}

func TestCollectStaleTemps(t *testing.T) {
	r := openRepo(t)
	old := filepath.Join(r.tmp, "obj-old")
	fresh := filepath.Join(r.tmp, "obj-fresh")
	for _, p := range []string{old, fresh} {
		write(t, p, "half written", 0o600)
	}
	past := time.Now().Add(-2 * staleTemp)
	os.Chtimes(old, past, past)
	st, err := r.Collect(context.Background(), roots())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) || st.Temps != 1 {
		t.Errorf("stale temp: stat err %v, Temps %d; want it removed", err, st.Temps)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp: %v; want it kept", err)
	}
	// Open removes stale ones too.
	os.Chtimes(fresh, past, past)
	r2, err := Open(r.Dir())
	if err != nil {
		t.Fatal(err)
	}
	r2.Close()
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("Open left a stale temp: %v", err)
	}
}

// TestCollectBesideShared checks that a due collection never keeps a new
// Shared caller waiting: while one holder (a slow checkpoint) keeps the
// lock, a collection waits to sweep, and another checkpoint takes the
// lock, builds, records and lets go; the collection removes nothing
// while the slow one holds the lock, sweeps once it lets go, and honours
// ctx while it waits.
func TestCollectBesideShared(t *testing.T) {
	steps := make(chan string, 16)
	r := openRepo(t, WithCollectHook(func(step string) { steps <- step }))
	ctx := context.Background()
	garbage := t.TempDir()
	write(t, filepath.Join(garbage, "old"), "dropped before the collection", 0o644)
	old, _ := build(t, r, garbage, Hash{}, nil, true)
	spreadAll(t, r)

	// A waiting collection gives up when ctx ends, removing nothing.
	slow, err := r.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Collect(short, roots())
		errc <- err
	}()
	if step := <-steps; step != "wait" {
		t.Fatalf("collection step %q, want wait", step)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Collect canceled while Shared is held: got %v, want Canceled", err)
	}
	if _, err := r.ReadTree(old); err != nil {
		t.Fatalf("a canceled collection removed a tree: %v", err)
	}

	// A collection due while the slow holder works.
	var mu sync.Mutex
	var live []Hash
	done := make(chan CollectStats, 1)
	go func() {
		st, err := r.Collect(ctx, func(context.Context) ([]Hash, error) {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(live), nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	if step := <-steps; step != "wait" {
		t.Fatalf("collection step %q, want wait", step)
	}
	// Another checkpoint, of one file, gets the lock while the slow one
	// holds it and the collection waits. (On a collector that waits in
	// line, this Shared waits for the slow holder: the test then fails at
	// its deadline.)
	quick := t.TempDir()
	write(t, filepath.Join(quick, "one"), "one file", 0o644)
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	unlock, err := r.Shared(bctx)
	if err != nil {
		t.Fatalf("a checkpoint waited behind the due collection: %v", err)
	}
	h, _, err := r.Build(bctx, openRoot(t, quick), Hash{}, nil, true)
	if err == nil {
		mu.Lock()
		live = append(live, h)
		mu.Unlock()
	}
	unlock()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-done:
		t.Fatalf("the collection ended (%+v) while a checkpoint held the lock", st)
	default:
	}
	if _, err := r.ReadTree(old); err != nil {
		t.Fatalf("the collection removed a tree while a checkpoint held the lock: %v", err)
	}
	slow()
	st := <-done
	if step := <-steps; step != "sweep" {
		t.Fatalf("collection step %q, want sweep", step)
	}
	if _, err := r.ReadTree(old); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadTree of the dropped tree after the collection: got %v, want ErrNotFound", err)
	}
	verifyAll(t, r, h)
	if st.Removed != 2 || st.Sweeps < 1 {
		t.Errorf("stats %+v: want the dropped tree and its blob removed, in a sweep", st)
	}
}

// TestCollectKeepsReused races collections against checkpoints that reuse
// objects the collection found unreachable: each round drops a tree,
// then a checkpoint builds the same content again (finding its objects
// in place) while a collection runs. In a third of the rounds the
// checkpoint runs, and is recorded, after the collection marked and
// before it sweeps; in the others wherever the scheduler puts it. Every
// recorded tree must read back whole after every round.
func TestCollectKeepsReused(t *testing.T) {
	const rounds = 150
	var between func()
	r := openRepo(t, WithCollectHook(func(step string) {
		if step == "wait" && between != nil {
			between()
			between = nil
		}
	}))
	ctx := context.Background()
	var (
		mu   sync.Mutex
		live []Hash
	)
	liveFn := func(context.Context) ([]Hash, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(live), nil
	}
	dir := t.TempDir()
	var removed int64
	for round := range rounds {
		content := fmt.Sprintf("round %d\n", round)
		write(t, filepath.Join(dir, "sub/file"), content, 0o644)
		write(t, filepath.Join(dir, "other"), "common to every round\n", 0o644)
		dropped, _ := build(t, r, dir, Hash{}, nil, true)
		spreadAll(t, r) // its objects loose: what a later build finds in place
		_ = dropped     // never recorded: garbage, which the next build reuses

		checkpoint := func() error {
			unlock, err := r.Shared(ctx)
			if err != nil {
				return err
			}
			defer unlock()
			h, _, err := r.Build(ctx, openRoot(t, dir), Hash{}, nil, true)
			if err != nil {
				return err
			}
			mu.Lock()
			live = append(live[:0], h) // the record, stored under the lock
			mu.Unlock()
			return nil
		}
		errc := make(chan error, 1)
		if round%3 == 0 {
			between = func() { errc <- checkpoint() }
		} else {
			go func() { errc <- checkpoint() }()
		}
		st, err := r.Collect(ctx, liveFn)
		if err != nil {
			t.Fatalf("round %d: collect: %v", round, err)
		}
		if between != nil { // no sweep was needed
			between()
			between = nil
		}
		if err := <-errc; err != nil {
			t.Fatalf("round %d: checkpoint: %v", round, err)
		}
		removed += st.Removed
		mu.Lock()
		h := live[0]
		mu.Unlock()
		verifyAll(t, r, h)
		if t.Failed() {
			t.Fatalf("round %d: a recorded tree lost objects to the collection", round)
		}
	}
	if removed == 0 {
		t.Errorf("no collection removed anything: the test tested nothing")
	}
}

// TestCollectUnderCheckpoints runs checkpoints of several workspaces
// while collections run and old roots are dropped, as the daemon would,
// then checks that every recorded root reads back whole. The workers'
// spreaders are slowed, so that their builds return (and are recorded,
// and are built upon) before their logs are spread, and collections, in
// a Repo of their own or in a worker's, run while logs are pending.
func TestCollectUnderCheckpoints(t *testing.T) {
	repoDir := filepath.Join(diskTempDir(t), "repo")
	const workers, rounds = 3, 12
	type record struct {
		worker int
		root   Hash
	}
	var (
		mu sync.Mutex
		db []record // the "database" of checkpoints
	)
	latest := func(w int) Hash {
		mu.Lock()
		defer mu.Unlock()
		for i := len(db) - 1; i >= 0; i-- {
			if db[i].worker == w {
				return db[i].root
			}
		}
		return Hash{}
	}
	live := func(context.Context) ([]Hash, error) {
		mu.Lock()
		defer mu.Unlock()
		var hs []Hash
		for _, rec := range db {
			hs = append(hs, rec.root)
		}
		return hs, nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers+2)
	slow := func(string) { time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond) }
	var workerRepos []*Repo
	for w := range workers {
		r, err := Open(repoDir, withSpreadHook(slow)) // one Repo each, as several daemons would
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		workerRepos = append(workerRepos, r)
		dir := t.TempDir()
		write(t, filepath.Join(dir, "common/lib.go"), "package common\n", 0o644)
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			for round := range rounds {
				unlock, err := r.Shared(ctx)
				if err != nil {
					errs <- err
					return
				}
				// The base is read from the database under the lock.
				base := latest(w)
				p := fmt.Sprintf("f%d", rnd.IntN(5))
				content := fmt.Sprintf("worker %d round %d\n", w, round)
				if round%3 == 0 {
					content = "shared between workers\n"
				}
				write(t, filepath.Join(dir, p), content, 0o644)
				sub := fmt.Sprintf("sub%d/deep/file", round%4)
				write(t, filepath.Join(dir, sub), content, 0o644)
				h, _, err := r.Build(ctx, openRoot(t, dir), base, []Change{{Path: p}, {Path: sub}, {Path: "sub0"}}, base.IsZero())
				if err == nil {
					mu.Lock()
					db = append(db, record{w, h})
					mu.Unlock()
				}
				unlock()
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, round, err)
					return
				}
				// A turn between checkpoints: the workers' checkpoints
				// overlap, but leave the lock free at times, as a
				// tenant's threads do; a collection sweeps then.
				time.Sleep(time.Duration(rnd.IntN(4)) * time.Millisecond)
			}
		})
	}
	// The dropper: forgets old checkpoints, never a worker's latest.
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			mu.Lock()
			if len(db) > 4 {
				i := rand.IntN(len(db) - 3)
				newer := slices.ContainsFunc(db[i+1:], func(rec record) bool { return rec.worker == db[i].worker })
				if newer {
					db = slices.Delete(db, i, i+1)
				}
			}
			mu.Unlock()
		}
	})
	var removed int64
	collections, pendingSeen := 0, 0
	side.Go(func() {
		own, err := Open(repoDir)
		if err != nil {
			errs <- err
			return
		}
		defer own.Close()
		for i := 0; ; i++ {
			// Collections come back often, though not back to back.
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if len(logsIn(t, repoDir)) > 0 {
				pendingSeen++
			}
			r := own
			if i%2 == 1 {
				r = workerRepos[i/2%workers]
			}
			st, err := r.Collect(ctx, live)
			if err != nil {
				errs <- fmt.Errorf("collect: %w", err)
				return
			}
			removed += st.Removed
			collections++
		}
	})
	wg.Wait()
	close(stop)
	side.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// One more collection, then everything recorded must be whole.
	r, err := Open(repoDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := r.Collect(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	removed += st.Removed
	for _, rec := range db {
		verifyAll(t, r, rec.root)
	}
	t.Logf("%d checkpoints kept, %d collections (%d with logs pending), %d objects removed", len(db), collections+1, pendingSeen, removed)
	if removed == 0 {
		t.Errorf("no collection removed anything: the test tested nothing")
	}
	if pendingSeen == 0 {
		t.Errorf("no collection ran with logs pending: the test tested nothing new")
	}
}
