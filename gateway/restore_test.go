package gateway

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/fs"
	"warren/meta"
)

// restartThreads is how many threads the restart tests bind: enough that
// a restore of all of them before serving would show, few enough to be
// fast.
const restartThreads = 200

// TestRestartServesAtOnce binds many threads, stops the gateway (cleanly,
// or as a SIGKILL leaves it: mounts whose server is gone and a checkpoint
// restore cut short) and starts it again with its background restore
// held. The API answers, a call for one thread serves that thread at once
// (and finishes its cut restore) while no other is mounted yet, an
// unserved mount path refuses writes, and once the hold ends every thread
// is served again.
func TestRestartServesAtOnce(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "clean stop"
		if crash {
			name = "kill -9"
		}
		t.Run(name, func(t *testing.T) { testRestartServesAtOnce(t, crash) })
	}
}

func testRestartServesAtOnce(t *testing.T, crash bool) {
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := Config{DataDir: dataDir, Store: store}
	var leaky *leakyMounter
	if crash {
		// Its mounts outlive the gateway, as a killed daemon's do.
		leaky = &leakyMounter{}
		cfg.mounter = leaky
	}
	env1 := startEnv(t, cfg)
	if leaky != nil {
		t.Cleanup(leaky.closeAll)
	}
	key := func(i int) (string, string) { return fmt.Sprintf("tenant-%d", i%5), fmt.Sprintf("t-%03d", i) }
	mounts := make([]string, restartThreads)
	var wg sync.WaitGroup
	errs := make(chan error, restartThreads)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < restartThreads; i += 8 {
				tenant, thread := key(i)
				br, err := env1.c.Bind(ctx, tenant, thread)
				if err != nil {
					errs <- err
					return
				}
				mounts[i] = br.MountPath
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Thread 9 has a checkpoint, then a file, then (below) an undo to
	// that checkpoint journaled and cut short.
	cutTenant, cutThread := key(9)
	cp, err := env1.c.History().Checkpoint(ctx, cutTenant, cutThread, api.CheckpointRequest{Label: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env1.c.Files().Write(ctx, cutTenant, cutThread, api.WriteFileRequest{Path: "after", Content: "undone by the restore"}); err != nil {
		t.Fatal(err)
	}
	if err := env1.g.Close(); err != nil {
		t.Fatal(err)
	}
	if crash {
		// The kernel aborts a killed server's connections: the mounts
		// stay, answering ENOTCONN.
		ents, err := fs.MountsUnder(filepath.Join(dataDir, "mnt"))
		if err != nil || len(ents) != restartThreads {
			t.Fatalf("mounts left by the crash: got %d, %v; want %d", len(ents), err, restartThreads)
		}
		for _, e := range ents {
			if _, err := fs.AbortConnection(e); err != nil {
				t.Fatal(err)
			}
		}
		k := meta.ThreadKey{Tenant: cutTenant, Thread: cutThread}
		h, err := store.GetHistory(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		h.Restoring = &meta.Restore{Op: "undo", To: cp.Checkpoint.ID, Tree: cp.Checkpoint.Tree, Head: cp.Checkpoint.ID, StartedAt: time.Now().UTC()}
		if _, err := store.PutHistory(ctx, h); err != nil {
			t.Fatal(err)
		}
	}

	gate := make(chan struct{})
	opened := false
	openGate := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	env2 := startEnv(t, Config{DataDir: dataDir, Store: store, remountGate: gate})
	t.Cleanup(openGate) // before Close, which would wait for nothing held anyway
	c := env2.c

	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("healthz while restoring: %v", err)
	}
	rd, err := c.Ready(ctx)
	if err != nil || !rd.Ready || rd.Restoring != restartThreads {
		t.Errorf("readyz while restoring: got ready %v, restoring %d, %v; want ready, restoring %d", rd.Ready, rd.Restoring, err, restartThreads)
	}
	if got := env2.m.made(); got != 0 {
		t.Fatalf("mounts made before the first call: got %d, want 0 (the restore runs before the API serves)", got)
	}
	// An unserved mount path refuses writes, root's too.
	unserved := mounts[3]
	mustMounted(t, unserved, false)
	if err := os.WriteFile(filepath.Join(unserved, "probe"), []byte("x"), 0o644); err == nil {
		t.Errorf("write to the unserved mount path %s: got nil, want it refused", unserved)
	}

	// A file write in one thread and a command in another: each serves
	// its own thread, now.
	wTenant, wThread := key(5)
	if _, err := c.Files().Write(ctx, wTenant, wThread, api.WriteFileRequest{Path: "hello", Content: "hi"}); err != nil {
		t.Fatalf("write in a thread not yet restored: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(mounts[5], "hello")); err != nil || string(got) != "hi" {
		t.Errorf("read through the mount of the thread asked for: got %q, %v", got, err)
	}
	eTenant, eThread := key(7)
	var out bytes.Buffer
	if code, err := c.Exec(ctx, eTenant, eThread, api.ExecRequest{Command: "echo served > f; cat f"}, &out, nil); err != nil || code != 0 || out.String() != "served\n" {
		t.Fatalf("exec in a thread not yet restored: exit %d, %v, %q", code, err, out.String())
	}
	// The thread with a cut restore: its first call finishes it.
	ex, err := c.Files().Exists(ctx, cutTenant, cutThread, api.ExistsRequest{Path: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Exists == crash {
		t.Errorf("file written after the checkpoint: got exists %v, want %v (the cut restore finished: %v)", ex.Exists, !crash, crash)
	}
	if got, want := env2.m.made(), 3; got != want {
		t.Errorf("mounts made for three calls: got %d, want %d: a call waited for other threads", got, want)
	}
	rd, err = c.Ready(ctx)
	if err != nil || rd.Restoring != restartThreads-3 {
		t.Errorf("readyz after three calls: got restoring %d, %v; want %d", rd.Restoring, err, restartThreads-3)
	}
	mustMounted(t, unserved, false)

	openGate()
	env2.waitRestored(t)
	if got := env2.m.made(); got != restartThreads {
		t.Errorf("mounts made once restored: got %d, want %d (each thread once)", got, restartThreads)
	}
	for _, p := range mounts {
		mustMounted(t, p, true)
	}
	if err := os.WriteFile(filepath.Join(unserved, "probe"), []byte("x"), 0o644); err != nil {
		t.Errorf("write to %s once served: %v", unserved, err)
	}
	rd, err = c.Ready(ctx)
	if err != nil || !rd.Ready || rd.Restoring != 0 {
		t.Errorf("readyz once restored: got ready %v, restoring %d, %v", rd.Ready, rd.Restoring, err)
	}
}

// TestStopUnmountsInParallel binds many threads and stops the gateway
// with each unmount held until another one runs: a stop that unmounts one
// by one never has two at once (and with ten thousand threads would
// outlast any stop timeout).
func TestStopUnmountsInParallel(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < restartThreads; i += 8 {
				if _, err := env.c.Bind(ctx, "acme", fmt.Sprintf("t-%d", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var (
		mu       sync.Mutex
		inFlight int
		most     int
		second   = make(chan struct{})
		alone    bool
		released bool
	)
	env.m.setFailClose(func(string) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == 2 && !released {
			released = true
			close(second)
		}
		mu.Unlock()
		select {
		case <-second:
		case <-time.After(10 * time.Second):
			mu.Lock()
			alone = true
			mu.Unlock()
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	start := time.Now()
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if alone || most < 2 {
		t.Errorf("unmounts at once at a stop: got at most %d, want more than one", most)
	}
	if live := env.live(t); len(live) != 0 {
		t.Errorf("got %d mounts after the stop, want 0", len(live))
	}
	t.Logf("a stop with %d threads bound took %v (at most %d unmounts at once)", restartThreads, took, most)
}
