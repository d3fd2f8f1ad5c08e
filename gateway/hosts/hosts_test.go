package hosts_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"warren/api"
	"warren/gateway/hosts"
	"warren/meta"
	"warren/meta/badger"
)

// Every test ends with no goroutine of a lease left: Close waits for them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var k = meta.ThreadKey{Tenant: "acme", Thread: "t"}

func newStore(t *testing.T) meta.Store {
	t.Helper()
	s, err := badger.Open(context.Background(), filepath.Join(t.TempDir(), "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// start starts the hosts room of host id on store; "" pins nothing.
func start(t *testing.T, store meta.Store, id string) *hosts.Hosts {
	t.Helper()
	h, err := hosts.Start(t.Context(), hosts.Config{
		HostID: id, RenewEvery: 50 * time.Millisecond, ExpiresAfter: 2 * time.Second,
		Store: store, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatalf("start hosts of %q: %v", id, err)
	}
	t.Cleanup(h.Close)
	return h
}

// TestClaimPinsOnce: the first host to claim a thread holds it; another
// host is refused with the owner and its folder named, and may not unpin
// it while the owner lives.
func TestClaimPinsOnce(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	web1, web2 := start(t, store, "web-1"), start(t, store, "web-2")
	b := meta.Binding{ThreadKey: k, HostID: "web-1", Root: "/srv/ws/acme/t"}

	if err := web1.Claim(ctx, k, &b); err != nil {
		t.Fatalf("web-1 claims a free thread: %v", err)
	}
	if _, held := web1.Holds(k); !held {
		t.Fatal("web-1 claimed the thread but does not hold its pin")
	}
	if err := web1.Claim(ctx, k, &b); err != nil {
		t.Fatalf("web-1 claims its own thread again: %v", err)
	}
	err := web2.Claim(ctx, k, &b)
	if !errors.Is(err, api.ErrPinned) {
		t.Fatalf("web-2 claims web-1's thread: got %v, want ErrPinned", err)
	}
	want := "The workspace of this thread is /srv/ws/acme/t on the host web-1. Only that host can continue the thread."
	if err.Error() != want {
		t.Errorf("refusal: got %q, want %q", err, want)
	}
	if got := web2.Owner(ctx, b); got != "web-1" {
		t.Errorf("owner seen from web-2: got %q, want web-1", got)
	}
	if err := web2.MayUnpin(ctx, k); !errors.Is(err, api.ErrPinned) || !strings.Contains(err.Error(), "live host web-1") {
		t.Errorf("web-2 unpins a thread of a live host: got %v, want ErrPinned naming web-1", err)
	}
	if err := web1.MayUnpin(ctx, k); err != nil {
		t.Errorf("web-1 unpins its own thread: %v", err)
	}
}

// TestForgetFreesThePin: a deleted thread's pin goes, and another host
// may claim the thread at once.
func TestForgetFreesThePin(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	web1, web2 := start(t, store, "web-1"), start(t, store, "web-2")
	if err := web1.Claim(ctx, k, nil); err != nil {
		t.Fatal(err)
	}
	web1.Forget(ctx, k)
	if err := web2.Claim(ctx, k, nil); err != nil {
		t.Fatalf("web-2 claims a forgotten pin: %v", err)
	}
}

// TestNoHostID: a daemon without a host id pins nothing and holds no
// lease (always valid), refuses only a thread another host holds a live
// pin on, and cannot take a thread over.
func TestNoHostID(t *testing.T) {
	ctx := t.Context()
	store := newStore(t)
	web1, shared := start(t, store, "web-1"), start(t, store, "")
	if ok, until := shared.Valid(); !ok || !until.IsZero() {
		t.Errorf("Valid without a host id: got %v %v, want true and no end", ok, until)
	}
	if err := shared.Claim(ctx, k, nil); err != nil {
		t.Errorf("claim of an unrecorded thread: %v", err)
	}
	if err := shared.Claim(ctx, k, &meta.Binding{ThreadKey: k}); err != nil {
		t.Errorf("claim of an unpinned binding: %v", err)
	}
	b := meta.Binding{ThreadKey: k, HostID: "web-1", Root: "/srv/ws/acme/t"}
	if err := web1.Claim(ctx, k, &b); err != nil {
		t.Fatal(err)
	}
	if err := shared.Claim(ctx, k, &b); !errors.Is(err, api.ErrPinned) {
		t.Errorf("claim of a thread web-1 pins: got %v, want ErrPinned", err)
	}
	if err := shared.MayUnpin(ctx, k); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("unpin without a host id: got %v, want ErrInvalid", err)
	}
	if _, held := shared.Holds(k); held {
		t.Error("a daemon without a host id holds a pin")
	}
}

// TestFencedWithoutLease: once the host's lease has run out (its
// heartbeats stopped) it serves no pinned thread: Claim says fenced, not
// pinned.
func TestFencedWithoutLease(t *testing.T) {
	store := newStore(t)
	h, err := hosts.Start(t.Context(), hosts.Config{
		HostID: "web-1", RenewEvery: 50 * time.Millisecond, ExpiresAfter: 600 * time.Millisecond,
		Store: store, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Claim(t.Context(), k, nil); err != nil {
		t.Fatalf("claim under a valid lease: %v", err)
	}
	h.Close() // no more heartbeats: the lease runs out
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ok, _ := h.Valid(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease is still valid 10 s after its last heartbeat")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.Claim(context.Background(), k, nil); !errors.Is(err, hosts.ErrFenced) || !errors.Is(err, api.ErrFenced) {
		t.Errorf("claim after the lease ran out: got %v, want ErrFenced", err)
	}
}

// TestGoneError names the lost folder and its host.
func TestGoneError(t *testing.T) {
	err := hosts.GoneError(meta.Binding{ThreadKey: k, Root: "/srv/ws/acme/t"})
	if !errors.Is(err, api.ErrGone) {
		t.Fatalf("got %v, want ErrGone", err)
	}
	want := "The workspace of this thread, /srv/ws/acme/t on the host (unpinned), is gone, so the tools cannot work on it."
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}
