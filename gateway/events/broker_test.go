package events

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"warren/api"
)

// testEvent is a kind of event that only tests emit.
const testEvent api.EventType = "test.tick"

func TestBrokerStalledSubscriber(t *testing.T) {
	b := newBroker(4)
	stalled, err := b.subscribe(eventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.cancel()
	other, err := b.subscribe(eventFilter{tenant: "acme", thread: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.cancel()

	// 4 fill the queue, 10 find it full. None of it may wait for the
	// reader, which reads nothing yet.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 14 {
			b.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: strconv.Itoa(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish blocked on a subscriber that does not read")
	}

	for i := range 4 {
		d := <-stalled.ch
		if ev := mustEvent(t, d); d.missed != 0 || ev.Message != strconv.Itoa(i) || ev.Seq != uint64(i+1) {
			t.Errorf("delivery %d: got %+v, want event %d (seq %d) with nothing missed", i, ev, i, i+1)
		}
	}
	b.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: "after"})
	b.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: "after 2"})
	d := <-stalled.ch
	ev := mustEvent(t, d)
	if d.missed != 10 || ev.Message != "after" || ev.Seq != 15 {
		t.Errorf("got %+v (%d missed), want event \"after\" (seq 15) with 10 missed before it", ev, d.missed)
	}
	m := stalled.missedEvent(d)
	if m.Type != api.EventMissed || m.Missed != 10 || m.Seq != 0 || !m.Time.Equal(ev.Time) {
		t.Errorf("got missed event %+v, want type missed, 10 missed, seq 0, the time of the next event", m)
	}
	if d := <-stalled.ch; d.missed != 0 || mustEvent(t, d).Message != "after 2" {
		t.Errorf("got %+v (%d missed), want event \"after 2\" with nothing missed: one missed event per loss", mustEvent(t, d), d.missed)
	}
	// A subscriber that none of it was for lost nothing.
	if len(other.ch) != 0 || other.missed != 0 {
		t.Errorf("filtered-out subscriber: got %d queued, %d missed; want none", len(other.ch), other.missed)
	}

	b.close()
	if _, ok := <-stalled.ch; ok {
		t.Errorf("queue still open after close")
	}
	if _, err := b.subscribe(eventFilter{}); !errors.Is(err, api.ErrClosed) {
		t.Errorf("subscribe after close: got %v, want ErrClosed", err)
	}
	b.Emit(api.Event{Type: testEvent}) // must neither panic nor block
	stalled.cancel()                   // after close: nothing to do
}

func TestEventFilterOf(t *testing.T) {
	tests := []struct {
		query string
		want  eventFilter
	}{
		{"", eventFilter{}},
		{"tenant=acme", eventFilter{tenant: "acme"}},
		{"tenant=", eventFilter{tenant: api.DefaultTenant}},
		{"thread=t1", eventFilter{tenant: api.DefaultTenant, thread: "t1"}},
		{"tenant=acme&thread=a%2Fb", eventFilter{tenant: "acme", thread: "a/b"}},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := eventFilterOf(q)
		if err != nil || got != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v", tt.query, got, err, tt.want)
		}
	}
}

// mustEvent is d's event, decoded from the line the stream would send.
func mustEvent(t *testing.T, d delivery) api.Event {
	t.Helper()
	ev, err := d.event()
	if err != nil {
		t.Fatalf("decode a delivery's line %q: %v", d.line, err)
	}
	return ev
}

// TestEventFilterPrefix: with a prefix, the file events of paths under it
// pass (a rename's old or new path), and the restores that changed such a
// path or whose list of paths is cut; no other event.
func TestEventFilterPrefix(t *testing.T) {
	f := eventFilter{tenant: "acme", thread: "t1", prefix: "/src"}
	many := make([]string, api.MaxEventPaths)
	for i := range many {
		many[i] = fmt.Sprintf("docs/%d", i)
	}
	for _, tc := range []struct {
		ev   api.Event
		want bool
	}{
		{api.Event{Type: api.EventFileCreated, Path: "/src/a.go"}, true},
		{api.Event{Type: api.EventFileChanged, Path: "/docs/a.md"}, false},
		{api.Event{Type: api.EventFileRenamed, From: "/src/a.go", Path: "/old/a.go"}, true},
		{api.Event{Type: api.EventThreadRestored, Paths: []string{"README.md", "src/a.go"}}, true},
		{api.Event{Type: api.EventThreadRestored, Paths: []string{"README.md"}}, false},
		{api.Event{Type: api.EventThreadRestored, Paths: many}, true}, // cut: it may have
		{api.Event{Type: api.EventJobOutput, Data: "x"}, false},
	} {
		tc.ev.Tenant, tc.ev.Thread = "acme", "t1"
		if got := f.match(tc.ev); got != tc.want {
			t.Errorf("%+v: match %v, want %v", tc.ev, got, tc.want)
		}
	}
	if f.match(api.Event{Type: api.EventFileCreated, Tenant: "acme", Thread: "t2", Path: "/src/a.go"}) {
		t.Errorf("another thread's event passed")
	}
}
