package events

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/metrics"
	"warren/internal/testenv"
	"warren/meta"
)

// countRefusals counts the refusals a Bus reports, by kind.
type countRefusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countRefusals) Refused(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[kind]++
}

func (c *countRefusals) count(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// next is sub's next event, failing the test if none comes in time.
func next(t *testing.T, sub *Subscription) api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return ev
}

// TestBusRefusals: a mount's refused escape and a refused stale write are
// counted under the kinds of package metrics, and each is an event of its
// thread.
func TestBusRefusals(t *testing.T) {
	refusals := &countRefusals{}
	bus, err := New(Config{LogSize: -1, Refusals: refusals, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	sub, err := bus.Subscribe("acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}

	bus.OnRefusal(k)(fs.Refusal{Op: "symlink", Path: "/leak", Reason: "its target leads out", Target: "/etc/passwd"})
	ev := next(t, sub)
	if ev.Type != api.EventEscapeRefused || ev.Tenant != "acme" || ev.Thread != "t1" || ev.Path != "/leak" ||
		ev.Message != `symlink of /leak refused: its target leads out (link target "/etc/passwd")` {
		t.Errorf("got %+v, want escape.refused of acme/t1 at /leak naming the target", ev)
	}
	if n := refusals.count(metrics.RefusedEscape); n != 1 {
		t.Errorf("counted %d refusals of kind %q, want 1", n, metrics.RefusedEscape)
	}

	bus.OnStale(k)(fs.Stale{Path: "/a.go"})
	ev = next(t, sub)
	if ev.Type != api.EventWriteStale || ev.Tenant != "acme" || ev.Thread != "t1" || ev.Path != "/a.go" || ev.Message == "" {
		t.Errorf("got %+v, want write.stale of acme/t1 at /a.go with a message", ev)
	}
	if n := refusals.count(metrics.RefusedStale); n != 1 {
		t.Errorf("counted %d refusals of kind %q, want 1", n, metrics.RefusedStale)
	}
}

// TestBusSubscription: an in-process reader gets the live events of its
// thread in order, a missed event where its queue lost some, and the end
// when the Bus closes; nothing is taken after Close.
func TestBusSubscription(t *testing.T) {
	bus, err := New(Config{LogSize: -1, Buffer: 2, Refusals: &countRefusals{}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := bus.Subscribe("", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := bus.Stats(); n != 1 {
		t.Errorf("got %d subscribers, want 1", n)
	}
	if !bus.Wants(meta.ThreadKey{Tenant: "any", Thread: "t1"}) || bus.Wants(meta.ThreadKey{Tenant: "any", Thread: "t2"}) {
		t.Errorf("Wants: want true for t1 of any tenant only")
	}
	for _, m := range []string{"1", "2", "lost", "lost too"} {
		bus.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: m})
	}
	bus.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t2", Message: "not for it"})
	for _, m := range []string{"1", "2"} {
		if ev := next(t, sub); ev.Message != m || ev.Type != testEvent {
			t.Errorf("got %+v, want event %s", ev, m)
		}
	}
	bus.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: "after"})
	if ev := next(t, sub); ev.Type != api.EventMissed || ev.Missed != 2 {
		t.Errorf("got %+v, want a missed event of 2", ev)
	}
	if ev := next(t, sub); ev.Message != "after" || ev.Seq != 6 {
		t.Errorf("got %+v, want event \"after\", seq 6", ev)
	}
	if _, missed := bus.Stats(); missed != 2 {
		t.Errorf("got %d missed in all, want 2", missed)
	}

	bus.Close()
	if _, err := sub.Next(context.Background()); !errors.Is(err, api.ErrClosed) {
		t.Errorf("Next after Close: got %v, want ErrClosed", err)
	}
	if _, err := bus.Subscribe("", ""); !errors.Is(err, api.ErrClosed) {
		t.Errorf("Subscribe after Close: got %v, want ErrClosed", err)
	}
	bus.Emit(api.Event{Type: testEvent}) // must neither panic nor block
	sub.Cancel()                         // after Close: nothing to do
	bus.Close()                          // again: nothing to do
	if n, _ := bus.Stats(); n != 0 {
		t.Errorf("got %d subscribers after Close, want 0", n)
	}
}

// TestBusLogAcrossRestart: a Bus made on the log of a closed one numbers
// on from its newest event, and a reader that comes back with since is
// given what it missed.
func TestBusLogAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.log")
	cfg := Config{LogPath: path, LogSize: 10, Refusals: &countRefusals{}, Logger: hclog.NewNullLogger()}
	bus, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		bus.Emit(api.Event{Type: testEvent, Thread: "t1"})
	}
	bus.Close()
	if err := bus.LogError(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}

	again, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	resp := openStream(t, serveEvents(t, again), "since=1")
	lines := testenv.EventLines(t, resp.Body)
	again.Emit(api.Event{Type: testEvent, Thread: "t1", Message: "new"})
	for _, want := range []uint64{2, 3, 4} {
		select {
		case ev := <-lines:
			if ev.Seq != want {
				t.Fatalf("got %+v, want seq %d", ev, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %d", want)
		}
	}
}

// TestBusFileEvents: a file's creation is told at once, and its change
// right after it when the creation's window ends; a thread nobody reads is
// not wanted.
func TestBusFileEvents(t *testing.T) {
	bus, err := New(Config{LogSize: -1, Refusals: &countRefusals{}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	if bus.Wants(k) {
		t.Errorf("Wants with no reader: got true")
	}
	sub, err := bus.Subscribe("acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	changed := bus.OnChange(k)
	start := time.Now()
	changed(fs.EntryChange{Kind: fs.Created, Path: "/new.go", Version: 1})
	changed(fs.EntryChange{Kind: fs.Changed, Path: "/new.go", Version: 2})
	if ev := next(t, sub); ev.Type != api.EventFileCreated || ev.Path != "/new.go" || ev.Version != 1 {
		t.Errorf("got %+v, want file.created of /new.go", ev)
	}
	ev := next(t, sub)
	if ev.Type != api.EventFileChanged || ev.Path != "/new.go" || ev.Version != 2 || ev.Thread != "t1" {
		t.Errorf("got %+v, want file.changed of /new.go, version 2", ev)
	}
	if took := time.Since(start); took < fileEventWindow {
		t.Errorf("the change came after %v, within the creation's window of %v", took, fileEventWindow)
	}
}
