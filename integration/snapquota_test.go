package integration

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotQuotaCLI: `warren bind --snapshot-quota` gives a thread its
// snapshot quota, `warren checkpoints` shows each checkpoint's own bytes,
// `warren usage` the thread's total against the quota, and a checkpoint
// past it is refused with the message that says what to free.
func TestSnapshotQuotaCLI(t *testing.T) {
	const quota = 3 << 20
	d := newDaemon(t, "--snapshot-quota", fmt.Sprint(64<<20))
	mnt := strings.TrimSpace(d.mustWarren("bind", "--thread", "s", "--snapshot-quota", fmt.Sprint(quota)))
	write := func(name string, n int) {
		b := make([]byte, n)
		rand.Read(b)
		must(t, os.WriteFile(filepath.Join(mnt, name), b, 0o644))
	}
	write("f.bin", 1<<20)
	d.mustWarren("checkpoint", "--thread", "s")
	write("f.bin", 1<<20)
	d.mustWarren("checkpoint", "--thread", "s")
	out := d.mustWarren("checkpoints", "--thread", "s")
	if !strings.Contains(out, "OWN") || strings.Count(out, fmt.Sprint(1<<20)) < 4 {
		t.Fatalf("warren checkpoints:\n%s\nwant an OWN column of %d bytes each", out, 1<<20)
	}
	out = d.mustWarren("usage", "--thread", "s")
	if !strings.Contains(out, "SNAPSHOTS") || !strings.Contains(out, "2.0MiB") || !strings.Contains(out, "3.0MiB") {
		t.Fatalf("warren usage:\n%s\nwant 2.0MiB of snapshots against a quota of 3.0MiB", out)
	}
	write("big.bin", 3<<20)
	_, err := d.warren("checkpoint", "--thread", "s")
	if err == nil || !strings.Contains(err.Error(), "The checkpoint was refused") || !strings.Contains(err.Error(), fmt.Sprintf("snapshot quota of %d", quota)) {
		t.Fatalf("a checkpoint past the snapshot quota: %v; want the refusal", err)
	}
	// The server's default, for a thread without a setting of its own.
	d.bind("default", "plain")
	if out := d.mustWarren("usage", "--thread", "plain"); !strings.Contains(out, "64.0MiB") {
		t.Fatalf("warren usage of a thread with the server's snapshot quota:\n%s\nwant 64.0MiB", out)
	}
}
