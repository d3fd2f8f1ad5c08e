package gateway

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"warren/api"
)

// liveHeap is the bytes of live objects of this process, after two
// collections (the second empties what sync.Pools kept through the first).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestJobMemory: a running job whose output filled its ring costs the
// daemon about the ring (1 MiB) and little more: 50 such jobs, idle after
// writing 2 MiB each, add at most 1.25 MiB of live heap apiece.
func TestJobMemory(t *testing.T) {
	const jobs, written = 50, 2 << 20
	env := startEnv(t, Config{MaxJobs: jobs})
	c, ctx := env.c, jobCtx(t)
	// The thread, its mount and its jail exist before the baseline.
	if code, err := c.Exec(ctx, "acme", "mem", api.ExecRequest{Command: "true"}, nil, nil); err != nil || code != 0 {
		t.Fatalf("first command: %d, %v", code, err)
	}
	before := liveHeap()
	ids := make([]string, jobs)
	for i := range ids {
		info, err := c.Spawn(ctx, "acme", "mem", api.SpawnRequest{Command: fmt.Sprintf("head -c %d /dev/zero; exec sleep 600", written)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = info.ID
	}
	for _, id := range ids {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			info, err := c.Job(ctx, "acme", "mem", id)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Running {
				t.Fatalf("job %s ended: %+v", id, info)
			}
			if info.OutputBytes == written {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s wrote %d of %d bytes within 60s", id, info.OutputBytes, written)
			}
		}
	}
	after := liveHeap()
	per := (float64(after) - float64(before)) / jobs / (1 << 20)
	t.Logf("live heap: %.1f MiB before, %.1f MiB with %d running jobs whose rings are full: %.2f MiB a job (ring: 1 MiB)",
		float64(before)/(1<<20), float64(after)/(1<<20), jobs, per)
	if per > 1.25 {
		t.Errorf("a running job costs %.2f MiB of live heap, want at most 1.25 (its ring is 1 MiB)", per)
	}
}
