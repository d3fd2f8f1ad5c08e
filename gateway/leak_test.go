package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"warren/api"
	"warren/internal/testenv"
)

// leakRounds is how many gateways TestStartStopLeavesNothing starts and
// stops under load.
const leakRounds = 20

// TestStartStopLeavesNothing starts and stops a gateway under load, many
// times: commands running and starting, jobs running, ending and being
// spawned, a thread closed while its job ends (closeIdle), an event
// subscriber, a job output follower, an inspection mount and a host id with
// its lease. After each Close, nothing of the gateway may run: no goroutine
// (goleak), no descriptor and no mount under the test's folders is left.
//
// A first round is not checked: it starts what a process starts once and
// keeps (the runtime's, the libraries' own), which the later rounds must
// find as they were.
func TestStartStopLeavesNothing(t *testing.T) {
	base := t.TempDir()
	t.Run("warm-up", func(t *testing.T) { loadAndClose(t, base, 0) })
	if t.Failed() {
		return
	}
	ignore := goleak.IgnoreCurrent()
	fds := openFDs(t)
	for i := 1; i <= leakRounds; i++ {
		if !t.Run(fmt.Sprintf("round-%d", i), func(t *testing.T) { loadAndClose(t, base, i) }) {
			return
		}
		if err := goleak.Find(ignore); err != nil {
			t.Fatalf("round %d: goroutines left after Close: %v", i, err)
		}
		waitFDs(t, i, fds)
		if left := testenv.MountsUnder(t, base); len(left) > 0 {
			t.Fatalf("round %d: mounts left after Close: %v", i, left)
		}
	}
}

// loadAndClose starts a gateway in base/round, puts it under load and
// closes it while the load runs; it returns once every client call of the
// load returned.
func loadAndClose(t *testing.T, base string, round int) {
	dir := filepath.Join(base, fmt.Sprint(round))
	inspect := filepath.Join(dir, "inspect")
	if err := os.MkdirAll(inspect, 0o755); err != nil {
		t.Fatal(err)
	}
	env := startEnv(t, Config{
		DataDir:      filepath.Join(dir, "data"),
		HostID:       "leak-host",
		RenewEvery:   minRenewEvery,
		ExpiresAfter: 10 * time.Second,
	})
	c := env.c
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every client call of the load runs in calls; the round ends only
	// once they all returned.
	var calls sync.WaitGroup
	defer calls.Wait()

	// An event subscriber, streaming when the gateway closes.
	calls.Add(1)
	go func() {
		defer calls.Done()
		c.Events(ctx, "", "", func(api.Event) error { return nil })
	}()
	waitSubscribers(t, env.g, 1)

	// A job that ends, and one that runs at Close, followed.
	ended, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "echo done; exit 3"})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if err := c.JobOutput(ctx, "acme", "t1", ended.ID, 0, true, func(api.JobFrame) error { return nil }); err != nil {
		t.Fatalf("follow job %s: %v", ended.ID, err)
	}
	running, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "echo up; exec sleep 300"})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	calls.Add(1)
	go func() {
		defer calls.Done()
		c.JobOutput(ctx, "acme", "t1", running.ID, 0, true, func(api.JobFrame) error { return nil })
	}()

	// A command that runs at Close.
	started := make(chan struct{})
	calls.Add(1)
	go func() {
		defer calls.Done()
		c.ExecStream(ctx, "acme", "t1", api.ExecRequest{Command: "exec sleep 300", OpenStdin: true},
			func(string) { close(started) }, nil, nil)
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the long command did not start")
	}

	// An inspection mount.
	if _, err := c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "t1", Path: inspect}); err != nil {
		t.Fatalf("inspection mount: %v", err)
	}

	// A thread closed while its job runs, whose job then ends: its jail
	// and mount go after it (closeIdle), racing the Close below.
	idle, err := c.Spawn(ctx, "acme", "t2", api.SpawnRequest{Command: "exec sleep 300"})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if _, err := c.CloseThread(ctx, "acme", "t2"); err != nil {
		t.Fatalf("close t2: %v", err)
	}
	if _, err := c.StopJob(ctx, "acme", "t2", idle.ID, 0); err != nil {
		t.Fatalf("stop job of t2: %v", err)
	}

	// Commands and spawns that go on until the gateway refuses them, in
	// flight while it closes.
	var closing atomic.Bool
	var churned sync.WaitGroup
	for w := range 4 {
		churned.Add(1)
		calls.Add(1)
		go func() {
			defer calls.Done()
			var once sync.Once
			defer once.Do(churned.Done)
			thread := fmt.Sprintf("c%d", w%2)
			for n := 0; ; n++ {
				var err error
				if n%2 == 0 {
					_, err = c.Exec(ctx, "acme", thread, api.ExecRequest{Command: "true"}, nil, nil)
				} else {
					_, err = c.Spawn(ctx, "acme", thread, api.SpawnRequest{Command: "true"})
				}
				if n == 1 {
					once.Do(churned.Done) // it runs, a spawn ran too
				}
				if (err != nil && closing.Load()) || ctx.Err() != nil {
					return
				}
			}
		}()
	}
	churned.Wait()

	closing.Store(true)
	if err := env.g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	env.c.CloseIdleConnections()
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// waitFDs waits for the open descriptors to be as many as want again: the
// client's connections close as their goroutines see the server go.
func waitFDs(t *testing.T, round, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := openFDs(t)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %d descriptors open after Close, %d before", round, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
