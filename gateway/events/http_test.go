package events

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/testenv"
)

// newTestBus is a Bus as the daemon makes it, with its log in a
// temporary folder; the test closes it at its end.
func newTestBus(t *testing.T) *Bus {
	t.Helper()
	bus, err := New(Config{LogPath: filepath.Join(t.TempDir(), "events.log"), Refusals: &countRefusals{}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Close)
	return bus
}

// serveEvents serves GET /v1/events of bus on a Unix socket, as the
// daemon's router does (the handler, then its stream), and returns the
// socket's path. The server is closed when the test ends.
func serveEvents(t *testing.T, bus *Bus) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "events.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandlers(bus)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a, err := h.Events(r, call.Params{})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			a.(call.Streamer).ServeStream(w, r)
		}),
		ConnContext: call.ConnContext,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return sock
}

// openStream sends GET /v1/events?query on sock and returns the answer,
// whose body the caller reads. Its headers have come, so the stream is
// subscribed.
func openStream(t *testing.T, sock, query string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://warren/v1/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		hc.CloseIdleConnections()
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/events: got status %s", resp.Status)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/x-ndjson" {
		t.Errorf("got Content-Type %q, want application/x-ndjson", got)
	}
	return resp
}

// TestEventsStalledStream stops reading a stream while many events are
// emitted: emit must not wait for it, and once it reads again it gets one
// missed event whose count is exactly the gap in seq it stands for.
func TestEventsStalledStream(t *testing.T) {
	bus := newTestBus(t)
	resp := openStream(t, serveEvents(t, bus), "thread=t1")
	sub := onlySubscription(t, bus)

	// A few big events fill the socket's buffers, so the stream's handler
	// blocks in a write and stops taking events out of its queue; the
	// queue then stays as it is until the test reads again.
	big := strings.Repeat("x", 64<<10)
	const first = 200
	for range first {
		bus.Emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1", Message: big})
	}
	waitWriteBlocked(t)
	queued := len(sub.ch)

	// Now the queue fills up and the rest is dropped: emit goes on.
	const second = 5000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range second {
			bus.Emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1"})
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("emit blocked on a stream that does not read")
	}

	// Read again, and send a marker once the stream has taken an event
	// out of its full queue: only this test emits and only publish fills
	// the queue, so the marker finds room and is the first delivery after
	// the loss, which carries the count.
	lines := testenv.EventLines(t, resp.Body)
	var got []api.Event
	deadline := time.After(60 * time.Second)
	for len(sub.ch) == cap(sub.ch) {
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended after %d events", len(got))
			}
			got = append(got, ev)
		case <-time.After(time.Millisecond): // look at the queue again
		case <-deadline:
			t.Fatalf("the stream took nothing out of its full queue; got %d events", len(got))
		}
	}
	bus.Emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1", Message: "marker"})
	for arrived := false; !arrived; {
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended after %d events", len(got))
			}
			got = append(got, ev)
			arrived = ev.Message == "marker"
		case <-deadline:
			t.Fatalf("no marker arrived; got %d events", len(got))
		}
	}
	wantMissed := uint64(second - (DefaultBuffer - queued))

	var missed []api.Event
	var lastSeq uint64
	for i, ev := range got {
		if ev.Type == api.EventMissed {
			missed = append(missed, ev)
			if gap := got[i+1].Seq - lastSeq - 1; ev.Missed != gap {
				t.Errorf("missed event says %d, but seq jumps from %d to %d", ev.Missed, lastSeq, got[i+1].Seq)
			}
			if ev.Tenant != api.DefaultTenant || ev.Thread != "t1" || ev.Seq != 0 {
				t.Errorf("got missed event %+v, want the stream's filter and seq 0", ev)
			}
			continue
		}
		if ev.Seq != lastSeq+1 && (i == 0 || got[i-1].Type != api.EventMissed) {
			t.Fatalf("seq jumps from %d to %d with no missed event", lastSeq, ev.Seq)
		}
		lastSeq = ev.Seq
	}
	if len(missed) != 1 || missed[0].Missed != wantMissed {
		t.Errorf("got missed events %+v, want one of %d", missed, wantMissed)
	}
	if last := got[len(got)-2]; last.Type != api.EventMissed {
		t.Errorf("got %+v before the marker, want the missed event", last)
	}
}

// onlySubscription returns bus's one subscription.
func onlySubscription(t *testing.T, bus *Bus) *subscription {
	t.Helper()
	bus.b.mu.Lock()
	defer bus.b.mu.Unlock()
	if len(bus.b.subs) != 1 {
		t.Fatalf("got %d subscriptions, want 1", len(bus.b.subs))
	}
	for s := range bus.b.subs {
		return s
	}
	return nil
}

// waitWriteBlocked waits until an event stream's handler is parked in a
// write that the socket cannot take (a goroutine in ServeStream waiting
// for its descriptor to become writable). Nobody reads the client's end,
// so it stays there: from then on the handler takes nothing out of its
// queue. How long the queue looked still says nothing under load; where
// the handler waits does.
func waitWriteBlocked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if n == len(buf) { // cut short: look again with room for all
			buf = make([]byte, 2*len(buf))
			continue
		}
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "waitWrite") && strings.Contains(g, ".(*eventStream).ServeStream(") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event stream blocked in a write")
		}
	}
}

// TestStreamResumeHeaders: a stream's answer says the newest event's seq
// when it began, from which a reader resumes with since and misses
// nothing, and names the Bus's run, the same for every stream of a Bus
// and another for another Bus (a restarted daemon).
func TestStreamResumeHeaders(t *testing.T) {
	bus := newTestBus(t)
	sock := serveEvents(t, bus)
	for range 3 {
		bus.Emit(api.Event{Type: api.EventThreadBound, Tenant: "acme", Thread: "t1"})
	}
	first := openStream(t, sock, "thread=t1&tenant=acme")
	if got := first.Header.Get(api.HeaderEventSeq); got != "3" {
		t.Errorf("%s: got %q, want 3", api.HeaderEventSeq, got)
	}
	bus.Emit(api.Event{Type: api.EventThreadClosed, Tenant: "acme", Thread: "t1"})
	again := openStream(t, sock, "thread=t1&tenant=acme&since="+first.Header.Get(api.HeaderEventSeq))
	if ev := <-testenv.EventLines(t, again.Body); ev.Seq != 4 || ev.Type != api.EventThreadClosed {
		t.Errorf("resumed after 3: got %+v, want the event 4", ev)
	}
	run := first.Header.Get(api.HeaderEventRun)
	if run == "" || again.Header.Get(api.HeaderEventRun) != run {
		t.Errorf("%s: %q then %q, want one run", api.HeaderEventRun, run, again.Header.Get(api.HeaderEventRun))
	}
	if other := openStream(t, serveEvents(t, newTestBus(t)), ""); other.Header.Get(api.HeaderEventRun) == run {
		t.Errorf("another Bus has the same run %q", run)
	}
}
