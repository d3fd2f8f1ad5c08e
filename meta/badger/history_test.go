package badger_test

import (
	"path/filepath"
	"strings"
	"testing"

	"warren/meta"
)

// TestBadgerHistoryRewritesLeaveNoValueLog rewrites a large history many
// times. Each rewrite leaves the former copy behind; in the LSM tree
// compaction drops it, but in the value log, which this store never
// garbage collects, it would stay: the log would grow by a history per
// rewrite, a new file every 16 MiB.
func TestBadgerHistoryRewritesLeaveNoValueLog(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, dir)
	h := largeHistory(meta.ThreadKey{Tenant: "acme", Thread: "t-1"})
	const rewrites = 40 // 20 MiB in all, more than one value log file holds
	var err error
	for i := range rewrites {
		if h, err = s.PutHistory(t.Context(), h); err != nil {
			t.Fatalf("PutHistory #%d: %v", i+1, err)
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 1 {
		t.Errorf("after %d rewrites of a history of about %d bytes: got %d value log files %q, want 1", rewrites, meta.MaxHistoryBytes/2, len(logs), logs)
	}
}

// largeHistory returns a history of thread k of half MaxHistoryBytes.
func largeHistory(k meta.ThreadKey) meta.History {
	return meta.History{
		ThreadKey:   k,
		NextSeq:     2,
		Checkpoints: []meta.Checkpoint{{ID: "cp-1", Seq: 1, Tree: strings.Repeat("f", meta.MaxHistoryBytes/2)}},
	}
}
