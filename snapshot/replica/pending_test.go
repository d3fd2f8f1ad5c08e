package replica

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// TestPending: a Pending put is read back as it was, bounded; another
// name's key holds none of it; a damaged one is refused; SweepPending
// deletes those of the names not live, and only those put before its
// bound.
func TestPending(t *testing.T) {
	ctx := t.Context()
	store, err := NewFolder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, MaxPendingPaths+5)
	for i := range paths {
		paths[i] = "p"
	}
	put := Pending{Name: "acme\x00t1", Host: "web-1", At: time.Now().UTC().Round(0), Base: "cp-7", Complete: true, Paths: paths}
	if err := PutPending(ctx, store, put); err != nil {
		t.Fatal(err)
	}
	got, err := GetPending(ctx, store, "acme\x00t1")
	if err != nil || got.Base != "cp-7" || got.Host != "web-1" || len(got.Paths) != MaxPendingPaths || got.More != 5 || !got.At.Equal(put.At) {
		t.Fatalf("GetPending: %+v, %v", got, err)
	}
	if _, err := GetPending(ctx, store, "acme\x00t2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetPending of a name never put: %v, want ErrNotFound", err)
	}
	// What one name's key holds is refused for another (a hash clash,
	// a record copied by hand).
	b := getRaw(t, store, pendingKey("acme\x00t1"))
	putRaw(t, store, pendingKey("acme\x00t3"), b)
	if _, err := GetPending(ctx, store, "acme\x00t3"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("GetPending of another name's record: %v, want ErrCorrupt", err)
	}
	putRaw(t, store, pendingKey("acme\x00t4"), []byte("{not json"))
	if _, err := GetPending(ctx, store, "acme\x00t4"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("GetPending of a damaged record: %v, want ErrCorrupt", err)
	}

	if n, err := SweepPending(ctx, store, []string{"acme\x00t1"}, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("SweepPending with a bound before every put: %d deleted, %v; want none", n, err)
	}
	if n, err := SweepPending(ctx, store, []string{"acme\x00t1"}, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Errorf("SweepPending: %d deleted, %v; want the two not live", n, err)
	}
	if _, err := GetPending(ctx, store, "acme\x00t1"); err != nil {
		t.Errorf("the live name's Pending after the sweep: %v", err)
	}
	if _, err := store.Stat(ctx, pendingKey("acme\x00t3")); !errors.Is(err, ErrNotFound) {
		t.Errorf("a swept Pending is still there: %v", err)
	}
}

// getRaw reads what key holds.
func getRaw(t *testing.T, store Store, key string) []byte {
	t.Helper()
	rc, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putRaw puts b under key.
func putRaw(t *testing.T, store Store, key string, b []byte) {
	t.Helper()
	if err := store.Put(t.Context(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}
