package keyed

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestKeyedLocksCancel(t *testing.T) {
	var kl Locks[string]
	unlock, err := kl.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := kl.Lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second lock: got %v, want DeadlineExceeded", err)
	}
	other, err := kl.Lock(context.Background(), "b")
	if err != nil {
		t.Fatalf("lock of another key: %v", err)
	}
	other()
	unlock()
	if got := kl.Size(); got != 0 {
		t.Errorf("got %d locks left, want 0", got)
	}
}
