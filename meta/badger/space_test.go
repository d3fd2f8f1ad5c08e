package badger_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/badger"
	"warren/meta/metatest"
)

// TestBadgerFullDisk fills the disk of a store (a small ext4 of the test's
// own) as root. Badger writes through mmap'd files, where a write on a
// full disk is a SIGBUS that kills the process. The store must refuse
// writes with ErrNoSpace and go on reading, close, open again on the full
// disk, and take writes again once space is back, with nothing lost.
func TestBadgerFullDisk(t *testing.T) {
	ctx := t.Context()
	mnt := testenv.LoopFS(t, 128<<20, "mkfs.ext4", []string{"-q"}, "")
	dir := filepath.Join(mnt, "meta")
	s := openBadger(t, dir)
	kept, err := s.CreateBinding(ctx, metatest.Binding("acme", "kept"))
	if err != nil {
		t.Fatalf("CreateBinding: %v", err)
	}
	// A history is the largest record: one write of it fills pages of
	// the log that a binding's never would.
	keptHistory, err := s.PutHistory(ctx, largeHistory(kept.ThreadKey))
	if err != nil {
		t.Fatalf("PutHistory: %v", err)
	}
	filler := testenv.FillDisk(t, mnt)

	// Enough writes, with big enough records, to need new pages of the
	// log: each would be a SIGBUS.
	refused := func(s *badger.Store, when string) {
		t.Helper()
		for i := range 64 {
			b := metatest.Binding("acme", fmt.Sprintf("new-%d", i))
			b.Settings.Env = map[string]string{"PAD": strings.Repeat("x", 8<<10)}
			if _, err := s.CreateBinding(ctx, b); !errors.Is(err, meta.ErrNoSpace) {
				t.Fatalf("CreateBinding %s: %v; want ErrNoSpace", when, err)
			}
		}
		for i := range 8 {
			if _, err := s.PutHistory(ctx, largeHistory(meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("new-%d", i)})); !errors.Is(err, meta.ErrNoSpace) {
				t.Fatalf("PutHistory create %s: %v; want ErrNoSpace", when, err)
			}
			if _, err := s.PutHistory(ctx, keptHistory); !errors.Is(err, meta.ErrNoSpace) {
				t.Fatalf("PutHistory replace %s: %v; want ErrNoSpace", when, err)
			}
		}
		if err := s.DeleteHistory(ctx, keptHistory.ThreadKey); !errors.Is(err, meta.ErrNoSpace) {
			t.Fatalf("DeleteHistory %s: %v; want ErrNoSpace", when, err)
		}
		if got, err := s.GetBinding(ctx, kept.ThreadKey); err != nil || got.Revision != kept.Revision {
			t.Fatalf("GetBinding %s: %+v, %v; want the kept binding", when, got, err)
		}
		if list, err := s.ListHistories(ctx, "acme"); err != nil || len(list) != 1 || list[0].Revision != keptHistory.Revision {
			t.Fatalf("ListHistories %s: %d histories, %v; want the kept history", when, len(list), err)
		}
	}
	refused(s, "on a full disk")
	closeBadger(t, s)

	s = openBadger(t, dir)
	refused(s, "after an open on a full disk")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	added, err := s.CreateBinding(ctx, metatest.Binding("acme", "added"))
	if err != nil {
		t.Fatalf("CreateBinding once space is back: %v", err)
	}
	if keptHistory, err = s.PutHistory(ctx, keptHistory); err != nil {
		t.Fatalf("PutHistory once space is back: %v", err)
	}
	closeBadger(t, s)
	s = openBadger(t, dir)
	for _, b := range []meta.Binding{kept, added} {
		if got, err := s.GetBinding(ctx, b.ThreadKey); err != nil || got.Revision != b.Revision {
			t.Fatalf("GetBinding %s after a reopen: %+v, %v", b.Thread, got, err)
		}
	}
	if got, err := s.GetHistory(ctx, keptHistory.ThreadKey); err != nil || got.Revision != keptHistory.Revision {
		t.Fatalf("GetHistory after a reopen: revision %d, %v; want %d", got.Revision, err, keptHistory.Revision)
	}
}

// TestBadgerSecondOpenLeavesTheLiveStore: a second open of a store that
// another opener holds fails on Badger's lock, and before that touches
// nothing of the live store: on a nearly full disk it must not give up the
// live store's ballast, which the live store needs for its own writes.
func TestBadgerSecondOpenLeavesTheLiveStore(t *testing.T) {
	mnt := testenv.LoopFS(t, 128<<20, "mkfs.ext4", []string{"-q"}, "")
	dir := filepath.Join(mnt, "meta")
	s := openBadger(t, dir)
	ballast := filepath.Join(dir, "warren-ballast")
	if _, err := os.Stat(ballast); err != nil {
		t.Fatalf("the live store's ballast: %v", err)
	}
	testenv.FillDisk(t, mnt)
	if s2, err := badger.Open(t.Context(), dir, nil); err == nil {
		s2.Close()
		t.Fatal("a second open of a held store succeeded")
	}
	if _, err := os.Stat(ballast); err != nil {
		t.Fatalf("the second open took the live store's ballast: %v", err)
	}
	closeBadger(t, s)
}
