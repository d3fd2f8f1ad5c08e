package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warren/api"
	"warren/gateway/threads"
	"warren/meta"
	"warren/snapshot"
)

// countObjects counts the loose objects of tenant's snapshot repository.
func countObjects(t testing.TB, env *testEnv, tenant string) int {
	t.Helper()
	dir := filepath.Join(env.g.cfg.SnapshotsDir, threads.EncodeID(tenant), "objects")
	n := 0
	for i := range 256 {
		ents, err := os.ReadDir(filepath.Join(dir, fmt.Sprintf("%02x", i)))
		if err != nil {
			t.Fatal(err)
		}
		n += len(ents)
	}
	return n
}

// waitStep waits for the collection step want, failing on any other.
func waitStep(t testing.TB, steps <-chan string, want string) {
	t.Helper()
	select {
	case got := <-steps:
		if got != want {
			t.Fatalf("collection step %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no collection step %q within 30s", want)
	}
}

// TestCollectionBesideCheckpoints holds thread slow's checkpoint once it
// holds its locks, deletes another thread of the tenant (a collection is
// then due and waits for the slow checkpoint), and checks that thread
// quick's one-file checkpoint finishes while both wait; the collection
// sweeps once the slow checkpoint is let go. (On a collector that waits
// in line for the exclusive lock, the quick checkpoint waits behind it
// for the slow one, and fails here at its deadline.)
func TestCollectionBesideCheckpoints(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	steps := make(chan string, 64)
	cfg := Config{
		checkpointHold: func(k meta.ThreadKey) {
			if k.Thread == "slow" && holding.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
		},
		collectHook: func(tenant, step string) {
			select {
			case steps <- step:
			default:
			}
		},
	}
	env := startEnv(t, cfg)
	// Registered after startEnv's, so it runs before its Close: a failed
	// test lets the held checkpoint go, or Close would wait for it.
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(let)
	ctx := context.Background()
	mounts := map[string]string{}
	for _, th := range []string{"slow", "quick", "gone"} {
		br, err := env.c.Bind(ctx, "acme", th)
		if err != nil {
			t.Fatal(err)
		}
		mounts[th] = br.MountPath
		if err := os.WriteFile(filepath.Join(br.MountPath, "file"), []byte("the file of "+th), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goneCp, err := env.c.History().Checkpoint(ctx, "acme", "gone", api.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	goneTree, err := snapshot.ParseHash(goneCp.Checkpoint.Tree)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := env.g.checkpoints.Repo("acme")
	if err != nil {
		t.Fatal(err)
	}
	slowDone := make(chan error, 1)
	go func() {
		_, err := env.c.History().Checkpoint(ctx, "acme", "slow", api.CheckpointRequest{Label: "slow"})
		slowDone <- err
	}()
	<-held
	before := countObjects(t, env, "acme")
	if err := env.c.DeleteThread(ctx, "acme", "gone"); err != nil {
		t.Fatal(err)
	}
	waitStep(t, steps, "wait") // the collection is due, and waits for slow

	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := env.c.History().Checkpoint(qctx, "acme", "quick", api.CheckpointRequest{Label: "quick"})
	if err != nil {
		t.Fatalf("the one-file checkpoint beside a held one and a due collection: %v", err)
	}
	t.Logf("the one-file checkpoint took %.1f ms of build beside the held checkpoint and the due collection", resp.Cost.Millis)
	select {
	case step := <-steps:
		t.Fatalf("collection step %q while the slow checkpoint held the lock", step)
	case err := <-slowDone:
		t.Fatalf("the held checkpoint ended (%v) before it was let go", err)
	default:
	}
	if n := countObjects(t, env, "acme"); n < before {
		t.Fatalf("objects removed while a checkpoint held the lock: %d, were %d", n, before)
	}
	if _, err := repo.ReadTree(goneTree); err != nil {
		t.Fatalf("the deleted thread's tree went while a checkpoint held the lock: %v", err)
	}

	let()
	if err := <-slowDone; err != nil {
		t.Fatalf("the held checkpoint: %v", err)
	}
	waitStep(t, steps, "sweep")
	waitStep(t, steps, "done")
	// The deleted thread's root tree is gone; slow's and quick's
	// checkpoints are whole.
	if _, err := repo.ReadTree(goneTree); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("the deleted thread's tree after the collection: got %v, want ErrNotFound", err)
	}
	for _, th := range []string{"slow", "quick"} {
		if err := os.WriteFile(filepath.Join(mounts[th], "file"), []byte("changed"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := env.c.History().Undo(ctx, "acme", th, false); err != nil {
			t.Fatalf("undo of %s after the collection: %v", th, err)
		}
		if got, err := os.ReadFile(filepath.Join(mounts[th], "file")); err != nil || string(got) != "the file of "+th {
			t.Errorf("%s after the undo: %q, %v", th, got, err)
		}
	}
}

// TestCheckpointLimits lowers each checkpoint limit and checks that a
// workspace past it is refused with 413 "too_large" naming the limit, its
// value and its flag, that nothing is recorded, and that the thread
// checkpoints again once it is within.
func TestCheckpointLimits(t *testing.T) {
	env := startEnv(t, Config{CheckpointLimits: snapshot.Limits{Entries: 20, Depth: 4, Bytes: 10000}})
	ctx := context.Background()
	for _, tc := range []struct {
		limit string
		max   int64
		make  func(mnt string) error
		fix   func(mnt string) error
	}{
		{"entries", 20, func(mnt string) error {
			for i := range 25 {
				if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
					return err
				}
			}
			return nil
		}, func(mnt string) error {
			for i := 5; i < 25; i++ {
				if err := os.Remove(filepath.Join(mnt, fmt.Sprintf("f%02d", i))); err != nil {
					return err
				}
			}
			return nil
		}},
		{"depth", 4, func(mnt string) error {
			return os.MkdirAll(filepath.Join(mnt, "a/b/c/d/e/f"), 0o755)
		}, func(mnt string) error { return os.RemoveAll(filepath.Join(mnt, "a/b/c/d")) }},
		{"bytes", 10000, func(mnt string) error {
			return os.WriteFile(filepath.Join(mnt, "big"), []byte(strings.Repeat("y", 20000)), 0o644)
		}, func(mnt string) error { return os.Truncate(filepath.Join(mnt, "big"), 100) }},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			br, err := env.c.Bind(ctx, "acme", tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.make(br.MountPath); err != nil {
				t.Fatal(err)
			}
			_, err = env.c.History().Checkpoint(ctx, "acme", tc.limit, api.CheckpointRequest{})
			var apiErr *api.APIError
			if !errors.As(err, &apiErr) || apiErr.Code != api.CodeTooLarge || apiErr.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("checkpoint past the %s limit: got %v, want 413 too_large", tc.limit, err)
			}
			for _, want := range []string{fmt.Sprint(tc.max), "--checkpoint-max-" + tc.limit, tc.limit} {
				if !strings.Contains(apiErr.Message, want) {
					t.Errorf("the message %q does not say %q", apiErr.Message, want)
				}
			}
			list, err := env.c.History().Checkpoints(ctx, "acme", tc.limit)
			if err != nil || len(list.Checkpoints) != 0 {
				t.Fatalf("checkpoints after the refused one: %+v, %v; want none", list, err)
			}
			if err := tc.fix(br.MountPath); err != nil {
				t.Fatal(err)
			}
			if _, err := env.c.History().Checkpoint(ctx, "acme", tc.limit, api.CheckpointRequest{}); err != nil {
				t.Fatalf("checkpoint within the limits: %v", err)
			}
		})
	}
}

// BenchmarkCheckpointBesideCollection times a one-file checkpoint through
// the API: alone, then while another thread's checkpoint of the tenant is
// held once it took its locks (as a 30 s one would be) and a collection
// (after a third thread's delete) is due and waits for it. make bench
// runs it (bench/checkpoint.sh); the target beside is under 100 ms.
func BenchmarkCheckpointBesideCollection(b *testing.B) {
	held, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	steps := make(chan string, 64)
	env := startEnv(b, Config{
		checkpointHold: func(k meta.ThreadKey) {
			if k.Thread == "slow" && holding.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
		},
		collectHook: func(tenant, step string) {
			select {
			case steps <- step:
			default:
			}
		},
	})
	ctx := context.Background()
	mounts := map[string]string{}
	for _, th := range []string{"slow", "quick", "gone"} {
		br, err := env.c.Bind(ctx, "acme", th)
		if err != nil {
			b.Fatal(err)
		}
		mounts[th] = br.MountPath
		if err := os.WriteFile(filepath.Join(br.MountPath, "file"), []byte("the file of "+th), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := env.c.History().Checkpoint(ctx, "acme", "gone", api.CheckpointRequest{}); err != nil {
		b.Fatal(err)
	}
	i := 0
	oneFile := func(b *testing.B) {
		for b.Loop() {
			i++
			if err := os.WriteFile(filepath.Join(mounts["quick"], "file"), []byte(fmt.Sprint("turn ", i)), 0o644); err != nil {
				b.Fatal(err)
			}
			if _, err := env.c.History().Checkpoint(ctx, "acme", "quick", api.CheckpointRequest{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/checkpoint")
	}
	b.Run("alone", oneFile)

	slowDone := make(chan error, 1)
	go func() {
		_, err := env.c.History().Checkpoint(ctx, "acme", "slow", api.CheckpointRequest{})
		slowDone <- err
	}()
	<-held
	if err := env.c.DeleteThread(ctx, "acme", "gone"); err != nil {
		b.Fatal(err)
	}
	waitStep(b, steps, "wait")
	b.Run("beside-held-checkpoint-and-due-collection", oneFile)
	select {
	case step := <-steps:
		b.Fatalf("collection step %q while the slow checkpoint was held", step)
	default:
	}
	close(release)
	if err := <-slowDone; err != nil {
		b.Fatal(err)
	}
	waitStep(b, steps, "sweep")
	waitStep(b, steps, "done")
}
