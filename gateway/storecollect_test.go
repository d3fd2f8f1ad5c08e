package gateway

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// TestSnapshotStoreCollected: a daemon on a real S3 server deletes from
// the store, after a thread's delete, what no other checkpoint
// references: the deleted thread's manifests at once, its own packs at
// the collection after (its grace, a nanosecond here, past); another
// thread's manifests and packs stay, and its tree comes whole into a
// fresh repository; so do a thread's that shares its content with the
// thread deleted.
func TestSnapshotStoreCollected(t *testing.T) {
	testenv.RequireRootFUSE(t)
	srv := testenv.S3Server(t)
	srv.UseCredentials(t)
	srv.MakeBucket(t, "warren")
	url := srv.URL("warren", "collected")
	ctx := t.Context()
	store, err := replica.NewS3(ctx, url)
	if err != nil {
		t.Fatal(err)
	}

	type sweep struct {
		st  replica.SweepStats
		err error
	}
	sweeps := make(chan sweep, 16)
	env := startEnv(t, Config{SnapshotStore: url, storeGrace: time.Nanosecond, storeCollectEvery: time.Hour,
		storeCollectHook: func(st replica.SweepStats, err error) { sweeps <- sweep{st, err} }})
	// collected waits for the next collection (asked for by a delete, or
	// by ask), and fails the test unless it succeeded.
	collected := func(ask bool) replica.SweepStats {
		t.Helper()
		if ask {
			env.g.replicas.Dropped("acme")
		}
		select {
		case s := <-sweeps:
			if s.err != nil {
				t.Fatalf("collection: %v", s.err)
			}
			t.Logf("collection: %+v", s.st)
			return s.st
		case <-time.After(2 * time.Minute):
			t.Fatal("no collection within two minutes")
			return replica.SweepStats{}
		}
	}

	a := checkpointFile(t, env, "gc-a", "alpha, only in thread a")
	b := checkpointFile(t, env, "gc-b", "shared by threads b and c")
	c := checkpointFile(t, env, "gc-c", "shared by threads b and c")
	for _, cp := range []struct{ thread, id string }{{"gc-a", a.Checkpoint.ID}, {"gc-b", b.Checkpoint.ID}, {"gc-c", c.Checkpoint.ID}} {
		waitReplicated(t, env, cp.thread, cp.id, true)
	}
	packsA, packsB, packsC := manifestPacks(t, store, a.Checkpoint.Tree), manifestPacks(t, store, b.Checkpoint.Tree), manifestPacks(t, store, c.Checkpoint.Tree)
	ownA := slices.DeleteFunc(slices.Clone(packsA), func(p string) bool { return slices.Contains(packsB, p) || slices.Contains(packsC, p) })
	sharedBC := slices.DeleteFunc(slices.Clone(packsC), func(p string) bool { return !slices.Contains(packsB, p) })
	if len(ownA) == 0 || len(sharedBC) == 0 {
		t.Fatalf("packs of a %q, b %q, c %q: want some of a's its own, some shared by b and c", packsA, packsB, packsC)
	}

	// Thread a deleted: its manifest goes; its packs are held a grace.
	if err := env.c.DeleteThread(ctx, "acme", "gc-a"); err != nil {
		t.Fatal(err)
	}
	if st := collected(false); st.Manifests != 1 {
		t.Errorf("collection after a's delete: %+v; want its manifest deleted", st)
	}
	held := storeKeys(t, store)
	if slices.Contains(held, "trees/"+a.Checkpoint.Tree) {
		t.Errorf("a's manifest is still in the store")
	}
	// The next collection: past the grace, a's own packs go.
	if st := collected(true); st.Packs < len(ownA) {
		t.Errorf("second collection: %+v; want a's %d own packs deleted", st, len(ownA))
	}
	held = storeKeys(t, store)
	for _, p := range ownA {
		if slices.Contains(held, p) {
			t.Errorf("a's pack %s is still in the store", p)
		}
	}
	for _, k := range append(append([]string{"trees/" + b.Checkpoint.Tree, "trees/" + c.Checkpoint.Tree}, packsB...), packsC...) {
		if !slices.Contains(held, k) {
			t.Errorf("%s (of thread b or c) is gone from the store", k)
		}
	}
	fetchFresh(t, store, b.Checkpoint.Tree)
	fetchFresh(t, store, c.Checkpoint.Tree)

	// Thread c deleted: what it shares with b stays (its tree, here:
	// the same files make the same tree).
	if err := env.c.DeleteThread(ctx, "acme", "gc-c"); err != nil {
		t.Fatal(err)
	}
	collected(false)
	collected(true)
	held = storeKeys(t, store)
	// Same content, same tree: c's manifest is b's, and stays.
	if c.Checkpoint.Tree != b.Checkpoint.Tree && slices.Contains(held, "trees/"+c.Checkpoint.Tree) {
		t.Errorf("c's manifest is still in the store")
	}
	for _, k := range append([]string{"trees/" + b.Checkpoint.Tree}, packsB...) {
		if !slices.Contains(held, k) {
			t.Errorf("%s (of thread b) is gone from the store", k)
		}
	}
	fetchFresh(t, store, b.Checkpoint.Tree)

	// The metrics' figures: four collections, none failed, bytes freed.
	if ok, failed, freed := env.g.replicas.Collections(); ok < 4 || failed != 0 || freed <= 0 {
		t.Errorf("collections: %d ok, %d failed, %d bytes freed; want 4 or more ok, none failed, some bytes", ok, failed, freed)
	}
}

// manifestPacks are the keys of the packs tree's manifest names.
func manifestPacks(t *testing.T, store replica.Store, tree string) []string {
	t.Helper()
	rc, err := store.Get(t.Context(), "trees/"+tree)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var packs []string
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		if kind, name, ok := strings.Cut(sc.Text(), " "); ok && (kind == "meta" || kind == "data") {
			packs = append(packs, "packs/"+name)
		}
	}
	if err := sc.Err(); err != nil || len(packs) == 0 {
		t.Fatalf("manifest of %s: %d packs, %v", tree, len(packs), err)
	}
	return packs
}

func storeKeys(t *testing.T, store replica.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(t.Context(), "", func(i replica.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// fetchFresh fetches tree from the store into a new repository: every
// object of it must be there, whole.
func fetchFresh(t *testing.T, store replica.Store, tree string) {
	t.Helper()
	h, err := snapshot.ParseHash(tree)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := snapshot.Open(filepath.Join(t.TempDir(), "repo"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := replica.Fetch(ctx, repo, store, h, replica.FetchOptions{}); err != nil {
		t.Fatalf("fetch tree %s into a fresh repository: %v", tree, err)
	}
	if err := repo.Raw().Objects(ctx, h, func(o snapshot.Hash, _ snapshot.ObjectKind) error {
		if !repo.Raw().Has(o) {
			return fmt.Errorf("object %s missing after the fetch", o)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
