package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"warren/api"
)

// TestUsageMatchesTheWork makes a known workload in a thread — files of
// a known size through its mount, a CPU loop, an allocation, a job that
// keeps running — and reads it back from GET .../usage, warren usage and
// warren ls --usage.
func TestUsageMatchesTheWork(t *testing.T) {
	d := newDaemon(t)
	mnt := d.bind("default", "u")
	c := d.client()
	ctx := context.Background()

	// No jail yet: its figures are zero, the disk's are there.
	must(t, os.Mkdir(filepath.Join(mnt, "src"), 0o755))
	for i := range 10 {
		must(t, os.WriteFile(filepath.Join(mnt, "src", "f"+strconv.Itoa(i)), []byte(strings.Repeat("x", 1000)), 0o644))
	}
	u, err := c.Usage(ctx, "", "u")
	must(t, err)
	if u.Jail || u.CPUSeconds != 0 || u.DiskBytes != 10_000 || u.DiskFiles != 11 || u.FUSERequests == 0 || u.Tenant != "default" || u.Thread != "u" {
		t.Errorf("before any command: %+v; want no jail, 10000 bytes in 11 entries, some FUSE requests", u)
	}

	// A loop of 0.3 s of CPU and 64 MiB touched, then a job that stays.
	spin := `perl -e '$x = "a" x (64 << 20); 1 while (times)[0] < 0.3'`
	if code, err := c.Exec(ctx, "", "u", api.ExecRequest{Command: spin}, io.Discard, io.Discard); err != nil || code != 0 {
		t.Fatalf("spin: exit %d, %v", code, err)
	}
	job, err := c.Spawn(ctx, "", "u", api.SpawnRequest{Command: "sleep 300"})
	must(t, err)
	t.Cleanup(func() { c.StopJob(context.Background(), "", "u", job.ID, 0) })

	u, err = c.Usage(ctx, "", "u")
	must(t, err)
	t.Logf("usage: %+v", u)
	if !u.Jail || u.CPUSeconds < 0.3 || u.MemoryPeakBytes < 64<<20 || u.MemoryBytes > u.MemoryPeakBytes {
		t.Errorf("after a 0.3 s loop over 64 MiB: %+v", u)
	}
	// The init, the job's bash (or sleep), at least.
	if u.Processes < 2 || u.JobsRunning != 1 || u.Jobs != 1 {
		t.Errorf("with one job running: %+v; want 2 processes or more, 1 job running of 1", u)
	}
	if u.DiskBytes != 10_000 || u.DiskFiles != 11 {
		t.Errorf("disk after the commands: %d bytes, %d entries; want 10000, 11", u.DiskBytes, u.DiskFiles)
	}

	// The CLI: warren usage (as JSON, the same figures), and ls --usage.
	out := d.mustWarren("usage", "--thread", "u", "--json")
	var cu api.Usage
	if err := json.Unmarshal([]byte(out), &cu); err != nil || cu.DiskBytes != 10_000 || cu.Jobs != 1 {
		t.Errorf("warren usage --json: %q, %v", out, err)
	}
	if out := d.mustWarren("ls", "--usage"); !strings.Contains(out, "FUSE OPS") || !strings.Contains(out, "9.8KiB") {
		t.Errorf("warren ls --usage:\n%s", out)
	}

	// A thread nobody bound.
	if _, err := c.Usage(ctx, "", "nobody"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("usage of an unbound thread: %v", err)
	}
}
