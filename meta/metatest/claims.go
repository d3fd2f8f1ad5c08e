package metatest

import (
	"context"
	"errors"
	"testing"
	"time"

	"warren/meta"
)

// testClaims: a claim is created once, replaced only from the revision
// read, and two hosts taking it from one state cannot both succeed.
func testClaims(t *testing.T, s meta.Store) {
	ctx := context.Background()
	if _, err := s.GetClaim(ctx, "sweep"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("GetClaim of none: %v, want ErrNotFound", err)
	}
	until := time.Now().Add(time.Minute).UTC().Round(time.Millisecond)
	a, err := s.PutClaim(ctx, meta.Claim{Name: "sweep", Holder: "a", Until: until})
	if err != nil || a.Revision == 0 {
		t.Fatalf("PutClaim (create): %+v, %v", a, err)
	}
	if _, err := s.PutClaim(ctx, meta.Claim{Name: "sweep", Holder: "b"}); !errors.Is(err, meta.ErrExists) {
		t.Errorf("PutClaim (create again): %v, want ErrExists", err)
	}
	got, err := s.GetClaim(ctx, "sweep")
	if err != nil || got.Holder != "a" || !got.Until.Equal(until) || got.Revision != a.Revision || got.Name != "sweep" {
		t.Errorf("GetClaim: %+v, %v; want %+v", got, err, a)
	}
	b := got
	b.Holder, b.Done = "b", until
	b, err = s.PutClaim(ctx, b)
	if err != nil || b.Revision == a.Revision {
		t.Fatalf("PutClaim (replace): %+v, %v", b, err)
	}
	stale := got
	stale.Holder = "c"
	if _, err := s.PutClaim(ctx, stale); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("PutClaim from a revision replaced: %v, want ErrConflict", err)
	}
	if got, err := s.GetClaim(ctx, "sweep"); err != nil || got.Holder != "b" || !got.Done.Equal(until) {
		t.Errorf("GetClaim: %+v, %v; want b's", got, err)
	}
	if _, err := s.GetClaim(ctx, "other"); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetClaim of another name: %v, want ErrNotFound", err)
	}
}
