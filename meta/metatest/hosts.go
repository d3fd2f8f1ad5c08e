package metatest

import (
	"errors"
	"testing"
	"time"

	"warren/meta"
)

// leaseTTL is the shortest lease the tests use: etcd refuses leases much
// shorter than its election timeout (about 2 s with its defaults).
const leaseTTL = 2 * time.Second

func heartbeat(t *testing.T, s meta.Store, host string, lease meta.LeaseID) meta.LeaseID {
	t.Helper()
	l, err := s.Heartbeat(t.Context(), host, lease, leaseTTL)
	if err != nil || l == 0 || lease != 0 && l != lease {
		t.Fatalf("Heartbeat(%q, %d) = %d, %v", host, lease, l, err)
	}
	return l
}

func hostAlive(t *testing.T, s meta.Store, id string) (meta.Host, bool) {
	t.Helper()
	hs, err := s.ListHosts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.ID == id {
			return h, true
		}
	}
	return meta.Host{}, false
}

// testHostsAndPins: leases keep hosts alive and their pins held; a pin of
// a live host refuses every other host; a lapsed lease takes its pins
// with it and cannot be renewed.
func testHostsAndPins(t *testing.T, s meta.Store) {
	ctx := t.Context()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t-1"}
	la := heartbeat(t, s, "host-a", 0)
	lb := heartbeat(t, s, "host-b", 0)
	if la == lb {
		t.Fatalf("two hosts got one lease %d", la)
	}
	heartbeat(t, s, "host-a", la)
	if h, ok := hostAlive(t, s, "host-a"); !ok || !h.Alive || h.TTL != leaseTTL || time.Since(h.LastBeat) > time.Minute {
		t.Errorf("host-a after a heartbeat: %+v, listed %v", h, ok)
	}

	if _, err := s.GetPin(ctx, k); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetPin of an unpinned thread: %v", err)
	}
	p, err := s.Pin(ctx, k, "host-a", la)
	if err != nil || p.HostID != "host-a" || p.Lease != la || p.ThreadKey != k {
		t.Fatalf("Pin: %+v, %v", p, err)
	}
	if _, err := s.Pin(ctx, k, "host-a", la); err != nil {
		t.Errorf("Pin again by its owner: %v", err)
	}
	p, err = s.Pin(ctx, k, "host-b", lb)
	if !errors.Is(err, meta.ErrPinned) || p.HostID != "host-a" {
		t.Errorf("Pin of a thread another live host holds: %+v, %v", p, err)
	}
	if p, err := s.GetPin(ctx, k); err != nil || p.HostID != "host-a" {
		t.Errorf("GetPin: %+v, %v", p, err)
	}
	// A second thread, pinned by host-b, sorts after the first.
	k2 := meta.ThreadKey{Tenant: "acme", Thread: "t-1\x00"}
	if _, err := s.Pin(ctx, k2, "host-b", lb); err != nil {
		t.Fatal(err)
	}
	if pins, err := s.ListPins(ctx); err != nil || len(pins) != 2 || pins[0].ThreadKey != k || pins[0].HostID != "host-a" ||
		pins[1].ThreadKey != k2 || pins[1].HostID != "host-b" {
		t.Errorf("ListPins: %+v, %v", pins, err)
	}
	// Unpinning someone else's pin does nothing.
	if err := s.Unpin(ctx, k, "host-b"); err != nil {
		t.Fatal(err)
	}
	if p, err := s.GetPin(ctx, k); err != nil || p.HostID != "host-a" {
		t.Errorf("GetPin after another host's unpin: %+v, %v", p, err)
	}

	// host-a stops beating; host-b goes on. host-a's lease lapses and its
	// pin with it.
	deadline := time.Now().Add(4 * leaseTTL)
	for {
		heartbeat(t, s, "host-b", lb)
		if _, err := s.GetPin(ctx, k); errors.Is(err, meta.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host-a's pin still holds %v after its last heartbeat", 4*leaseTTL)
		}
		time.Sleep(leaseTTL / 10)
	}
	if h, _ := hostAlive(t, s, "host-a"); h.Alive {
		t.Errorf("host-a listed alive after its lease lapsed: %+v", h)
	}
	if pins, err := s.ListPins(ctx); err != nil || len(pins) != 1 || pins[0].HostID != "host-b" {
		t.Errorf("ListPins after host-a lapsed: %+v, %v", pins, err)
	}
	if _, err := s.Heartbeat(ctx, "host-a", la, leaseTTL); !errors.Is(err, meta.ErrLeaseLost) {
		t.Errorf("renewing a lapsed lease: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Pin(ctx, k, "host-a", la); !errors.Is(err, meta.ErrLeaseLost) {
		t.Errorf("pinning under a lapsed lease: %v, want ErrLeaseLost", err)
	}
	if p, err := s.Pin(ctx, k, "host-b", lb); err != nil || p.HostID != "host-b" {
		t.Fatalf("Pin by host-b once host-a lapsed: %+v, %v", p, err)
	}
	// host-a comes back with a new lease: the thread is host-b's now.
	la2 := heartbeat(t, s, "host-a", 0)
	if la2 == la {
		t.Errorf("a new lease has the lapsed one's id %d", la)
	}
	if p, err := s.Pin(ctx, k, "host-a", la2); !errors.Is(err, meta.ErrPinned) || p.HostID != "host-b" {
		t.Errorf("Pin by the returning host: %+v, %v", p, err)
	}
	if err := s.Unpin(ctx, k, "host-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPin(ctx, k); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetPin after its owner's unpin: %v", err)
	}
}

// testPinRestartedHost: a host that restarts (a new lease while the old
// one still runs out) takes its own pins over; nobody else can meanwhile.
func testPinRestartedHost(t *testing.T, s meta.Store) {
	ctx := t.Context()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t-2"}
	old := heartbeat(t, s, "host-a", 0)
	if _, err := s.Pin(ctx, k, "host-a", old); err != nil {
		t.Fatal(err)
	}
	lb := heartbeat(t, s, "host-b", 0)
	if _, err := s.Pin(ctx, k, "host-b", lb); !errors.Is(err, meta.ErrPinned) {
		t.Errorf("Pin by host-b of host-a's thread: %v", err)
	}
	fresh := heartbeat(t, s, "host-a", 0)
	if p, err := s.Pin(ctx, k, "host-a", fresh); err != nil || p.Lease != fresh {
		t.Errorf("Pin by the restarted host-a: %+v, %v", p, err)
	}
	if p, err := s.GetPin(ctx, k); err != nil || p.HostID != "host-a" || p.Lease != fresh {
		t.Errorf("GetPin: %+v, %v", p, err)
	}
}

// testConcurrentPins: hosts racing to pin one thread: exactly one wins,
// the others are told who.
func testConcurrentPins(t *testing.T, s meta.Store) {
	k := meta.ThreadKey{Tenant: "acme", Thread: "contended"}
	hosts := []string{"h0", "h1", "h2", "h3"}
	leases := make([]meta.LeaseID, len(hosts))
	for i, h := range hosts {
		leases[i] = heartbeat(t, s, h, 0)
	}
	pins := make([]meta.Pin, len(hosts))
	errs := race(func(i int) error {
		if i >= len(hosts) {
			return nil
		}
		var err error
		pins[i], err = s.Pin(t.Context(), k, hosts[i], leases[i])
		return err
	})
	winner := ""
	for i, err := range errs[:len(hosts)] {
		switch {
		case err == nil:
			if winner != "" {
				t.Fatalf("both %s and %s pinned the thread", winner, hosts[i])
			}
			winner = hosts[i]
		case !errors.Is(err, meta.ErrPinned):
			t.Errorf("%s: %v", hosts[i], err)
		}
	}
	for i, err := range errs[:len(hosts)] {
		if err != nil && pins[i].HostID != winner {
			t.Errorf("%s was told the owner is %q, not %q", hosts[i], pins[i].HostID, winner)
		}
	}
	if winner == "" {
		t.Fatal("nobody pinned the thread")
	}
}
