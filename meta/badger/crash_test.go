package badger_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/meta"
	"warren/meta/badger"
)

// TestBadgerOpensAfterKillDuringMemtableCreate: a process killed between
// creating a memtable or value log file and sizing it leaves it empty (seen
// with kill -9 during a daemon's start). The store must still open, with
// every record it had: an empty file holds none.
func TestBadgerOpensAfterKillDuringMemtableCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	ctx := context.Background()
	s, err := badger.Open(ctx, dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.CreateBinding(ctx, meta.Binding{
		ThreadKey: meta.ThreadKey{Tenant: "acme", Thread: "t"}, Kind: meta.KindHost,
		Root: "/r", MountPath: "/m", BoundAt: time.Now().UTC(), State: meta.StateBound,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What the kill leaves: the next memtable or value log file, created,
	// not sized.
	for _, name := range []string{"00099.mem", "000099.vlog"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err = badger.Open(ctx, dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open after a kill during a memtable's creation: %v", err)
	}
	defer s.Close()
	got, err := s.GetBinding(ctx, want.ThreadKey)
	if err != nil || got.Root != want.Root {
		t.Fatalf("record after reopening: %+v, %v; want root %q", got, err, want.Root)
	}
}
