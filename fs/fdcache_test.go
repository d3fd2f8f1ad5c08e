package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestDescriptorBudget serves a tree far larger than the descriptor budget.
// Every operation still works (descriptors are reopened by handle), and the
// process never holds more node descriptors than the budget allows.
func TestDescriptorBudget(t *testing.T) {
	const budget = 16
	hub := newHub(HubConfig{}, budget)
	t.Cleanup(hub.Close)
	backing, mnt := mountTemp(t, Options{Hub: hub, EntryTimeout: -1, AttrTimeout: -1})
	for d := 0; d < 10; d++ {
		dir := filepath.Join(mnt, fmt.Sprintf("d%d", d), "sub")
		must(t, os.MkdirAll(dir, 0o755))
		for f := 0; f < 30; f++ {
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), []byte(fmt.Sprint(d, f)), 0o644))
		}
	}
	check := func(when string) {
		t.Helper()
		hub.fds.mu.Lock()
		open := hub.fds.open
		hub.fds.mu.Unlock()
		if open > budget {
			t.Errorf("%s: %d node descriptors open, budget %d", when, open, budget)
		}
	}
	check("after writing 300 files")
	for round := 0; round < 2; round++ {
		for d := 0; d < 10; d++ {
			for f := 0; f < 30; f++ {
				p := filepath.Join(mnt, fmt.Sprintf("d%d", d), "sub", fmt.Sprintf("f%d", f))
				got, err := os.ReadFile(p)
				if err != nil || string(got) != fmt.Sprint(d, f) {
					t.Fatalf("round %d: read %s: %q, %v", round, p, got, err)
				}
				must(t, os.Chmod(p, 0o600))
			}
		}
		check(fmt.Sprintf("after reading round %d", round))
	}
	// Renames and removals work on reopened descriptors too.
	must(t, os.Rename(filepath.Join(mnt, "d0", "sub", "f0"), filepath.Join(mnt, "d9", "moved")))
	must(t, os.RemoveAll(filepath.Join(mnt, "d1")))
	if _, err := os.Stat(filepath.Join(backing, "d9", "moved")); err != nil {
		t.Errorf("rename did not reach the backing folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(backing, "d1")); !os.IsNotExist(err) {
		t.Errorf("removal did not reach the backing folder: %v", err)
	}
	check("after renames")
}
