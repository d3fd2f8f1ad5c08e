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

// TestLock checks that Collect waits for Shared holders, that Shared waits
// for a collection, and that both honour ctx.
func TestLock(t *testing.T) {
	r := openRepo(t)
	ctx := context.Background()
	unlock, err := r.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second shared holder, from another Repo (as another process
	// would), gets in.
	other, err := Open(r.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	unlock2, err := other.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unlock2()

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := other.Collect(short, roots()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Collect while Shared is held: got %v, want DeadlineExceeded", err)
	}

	called := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := other.Collect(ctx, func(context.Context) ([]Hash, error) {
			close(called)
			time.Sleep(100 * time.Millisecond)
			return nil, nil
		})
		done <- err
	}()
	select {
	case <-called:
		t.Fatal("Collect ran while Shared was held")
	case <-time.After(100 * time.Millisecond):
	}
	// A new Shared caller waits behind the waiting collection.
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := r.Shared(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shared while a collection waits: got %v, want DeadlineExceeded", err)
	}
	unlock()
	<-called
	start := time.Now()
	unlock3, err := r.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Errorf("Shared did not wait for the running collection")
	}
	unlock3()
	if err := <-done; err != nil {
		t.Fatal(err)
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
			// Collections come back often, though not back to back: a
			// collection waiting or running holds new checkpoints back.
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
