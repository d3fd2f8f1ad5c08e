package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// testEvent is a kind of event that only tests emit.
const testEvent api.EventType = "test.tick"

// waitSubscribers waits until g's broker has n subscribers: a stream
// subscribes before it answers, but a Client.Events caller cannot see when
// that happened.
func waitSubscribers(t *testing.T, g *Gateway, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.events.mu.Lock()
		got := len(g.events.subs)
		g.events.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d event subscribers, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stream is a Client.Events call running in the background.
type stream struct {
	events chan api.Event // closed when Events returned
	err    error          // what Events returned; read after events is closed
	cancel context.CancelFunc
}

// follow starts c.Events(tenant, thread) and stops it when the test ends.
func follow(t *testing.T, c *client.Client, tenant, thread string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{events: make(chan api.Event, 4*eventBuffer), cancel: cancel}
	go func() {
		defer close(s.events)
		s.err = c.Events(ctx, tenant, thread, func(ev api.Event) error {
			s.events <- ev
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		for range s.events {
		}
	})
	return s
}

// next returns the stream's next event, failing the test if none comes.
func (s *stream) next(t *testing.T) api.Event {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("event stream ended: %v", s.err)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("no event within 20s")
	}
	return api.Event{}
}

// end waits for the stream to end and returns Events' error.
func (s *stream) end(t *testing.T, within time.Duration) error {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return s.err
			}
			t.Errorf("got event %+v while waiting for the end of the stream", ev)
		case <-timeout:
			t.Fatalf("event stream did not end within %v", within)
		}
	}
}

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

func TestEventsRequestErrors(t *testing.T) {
	env := startEnv(t, Config{})
	long := strings.Repeat("x", api.MaxIDBytes+1)
	tests := []struct {
		name, method, target string
		wantStatus           int
		wantCode             string
	}{
		{"unknown query", "GET", "/v1/events?job=1", 400, api.CodeInvalid},
		{"empty thread", "GET", "/v1/events?thread=", 400, api.CodeInvalid},
		{"thread twice", "GET", "/v1/events?thread=a&thread=b", 400, api.CodeInvalid},
		{"long tenant", "GET", "/v1/events?tenant=" + long, 400, api.CodeInvalid},
		{"tenant not utf-8", "GET", "/v1/events?tenant=%FF", 400, api.CodeInvalid},
		{"wrong method", "POST", "/v1/events", 405, api.CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawRequest(t, env.g.SocketPath(), tt.method, tt.target, nil)
			if resp.status != tt.wantStatus {
				t.Fatalf("got status %d (%s), want %d", resp.status, resp.body, tt.wantStatus)
			}
			if e := resp.apiError(t); e.Code != tt.wantCode {
				t.Errorf("got error %+v, want code %q", e, tt.wantCode)
			}
		})
	}
	// A refused request left no subscriber behind.
	waitSubscribers(t, env.g, 0)
}

// TestEventsOrderAndFilter emits from many goroutines at once and checks
// that every stream gets its events, only its events, each thread's in
// order.
func TestEventsOrderAndFilter(t *testing.T) {
	env := startEnv(t, Config{})
	all := follow(t, env.c, "", "")
	acme := follow(t, env.c, "acme", "")
	acmeT1 := follow(t, env.c, "acme", "t1")
	defaultT1 := follow(t, env.c, "", "t1") // the default tenant's t1
	waitSubscribers(t, env.g, 4)

	const perThread = 200
	threads := [][2]string{{"acme", "t1"}, {"acme", "t2"}, {"other", "t1"}, {api.DefaultTenant, "t1"}}
	var wg sync.WaitGroup
	for _, k := range threads {
		wg.Go(func() {
			for i := range perThread {
				env.g.emit(api.Event{Type: testEvent, Tenant: k[0], Thread: k[1], Message: strconv.Itoa(i)})
			}
		})
	}
	wg.Wait()

	check := func(name string, s *stream, want map[[2]string]bool) {
		t.Run(name, func(t *testing.T) {
			next := make(map[[2]string]int)
			var lastSeq uint64
			for range perThread * len(want) {
				ev := s.next(t)
				k := [2]string{ev.Tenant, ev.Thread}
				if !want[k] {
					t.Fatalf("got an event of %q/%q: %+v", k[0], k[1], ev)
				}
				if ev.Message != strconv.Itoa(next[k]) {
					t.Fatalf("%q/%q: got event %s, want %d: out of order", k[0], k[1], ev.Message, next[k])
				}
				next[k]++
				if ev.Seq <= lastSeq {
					t.Fatalf("got seq %d after %d", ev.Seq, lastSeq)
				}
				lastSeq = ev.Seq
				if ev.Type != testEvent || ev.Time.IsZero() {
					t.Fatalf("got %+v, want type %s and a time", ev, testEvent)
				}
			}
			select {
			case ev := <-s.events:
				t.Errorf("got an extra event %+v", ev)
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
	check("all", all, map[[2]string]bool{threads[0]: true, threads[1]: true, threads[2]: true, threads[3]: true})
	check("tenant", acme, map[[2]string]bool{threads[0]: true, threads[1]: true})
	check("thread", acmeT1, map[[2]string]bool{threads[0]: true})
	check("thread of the default tenant", defaultT1, map[[2]string]bool{threads[3]: true})
}

// openStream sends GET /v1/events?query on the gateway's socket and
// returns the answer, whose body the caller reads. Its headers have come,
// so the stream is subscribed.
func openStream(t *testing.T, env *testEnv, query string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://warren/v1/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP(env.g.SocketPath())
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

// readLines decodes the NDJSON lines of r into a channel, strictly: every
// line one event, no field the Event type does not have.
func readLines(t *testing.T, r *http.Response) <-chan api.Event {
	t.Helper()
	ch := make(chan api.Event, 1<<16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			var ev api.Event
			if err := dec.Decode(&ev); err != nil {
				t.Errorf("line %q is not an event: %v", sc.Bytes(), err)
				return
			}
			ch <- ev
		}
	}()
	return ch
}

// TestEventsStalledStream stops reading a stream while many events are
// emitted: emit must not wait for it, and once it reads again it gets one
// missed event whose count is exactly the gap in seq it stands for.
func TestEventsStalledStream(t *testing.T) {
	env := startEnv(t, Config{})
	resp := openStream(t, env, "thread=t1")
	waitSubscribers(t, env.g, 1)
	sub := onlySubscription(t, env.g)

	// A few big events fill the socket's buffers, so the stream's handler
	// blocks in a write and stops taking events out of its queue; the
	// queue then stays as it is until the test reads again.
	big := strings.Repeat("x", 64<<10)
	const first = 200
	for range first {
		env.g.emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1", Message: big})
	}
	waitWriteBlocked(t)
	queued := len(sub.ch)

	// Now the queue fills up and the rest is dropped: emit goes on.
	const second = 5000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range second {
			env.g.emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1"})
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
	lines := readLines(t, resp)
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
	env.g.emit(api.Event{Type: testEvent, Tenant: api.DefaultTenant, Thread: "t1", Message: "marker"})
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
	wantMissed := uint64(second - (eventBuffer - queued))

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

// onlySubscription returns g's one subscription.
func onlySubscription(t *testing.T, g *Gateway) *subscription {
	t.Helper()
	g.events.mu.Lock()
	defer g.events.mu.Unlock()
	if len(g.events.subs) != 1 {
		t.Fatalf("got %d subscriptions, want 1", len(g.events.subs))
	}
	for s := range g.events.subs {
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

// TestEventsEndOnClose: Close ends every stream, one that reads (Events
// returns ErrClosed) and one whose client stopped reading, and does not
// wait its shutdown grace for them.
func TestEventsEndOnClose(t *testing.T) {
	env := startEnv(t, Config{})
	reading := follow(t, env.c, "acme", "t2")
	openStream(t, env, "") // never read
	waitSubscribers(t, env.g, 2)
	// Enough for the stream nobody reads to block in a write.
	big := strings.Repeat("x", 64<<10)
	for range 100 {
		env.g.emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: big})
	}
	env.g.emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t2"})
	if ev := reading.next(t); ev.Thread != "t2" {
		t.Fatalf("got %+v, want the event of acme/t2", ev)
	}

	start := time.Now()
	if err := env.g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > shutdownGrace/2 {
		t.Errorf("Close took %v with event streams open", took)
	}
	if err := reading.end(t, 10*time.Second); !errors.Is(err, api.ErrClosed) {
		t.Errorf("Events after Close: got %v, want ErrClosed", err)
	}
	if err := env.c.Events(context.Background(), "", "", func(api.Event) error { return nil }); err == nil || errors.Is(err, api.ErrClosed) {
		t.Errorf("Events on a closed gateway: got %v, want a failure to connect", err)
	}
	env.g.emit(api.Event{Type: testEvent}) // after Close: dropped, no panic
}

// TestEventsThreadLifecycle binds, binds again, closes twice and deletes
// a thread, and reads the real stream: one thread event per change, none
// for what changed nothing, in order, as NDJSON.
func TestEventsThreadLifecycle(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	t1 := follow(t, env.c, "acme", "t1")
	raw := openStream(t, env, "tenant=acme&thread=t1")
	waitSubscribers(t, env.g, 2)

	br, err := env.c.Bind(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"bind again", func() error { _, err := env.c.Bind(ctx, "acme", "t1"); return err }},
		{"bind another thread", func() error { _, err := env.c.Bind(ctx, "acme", "t2"); return err }},
		{"close", func() error { _, err := env.c.CloseThread(ctx, "acme", "t1"); return err }},
		{"close again", func() error { _, err := env.c.CloseThread(ctx, "acme", "t1"); return err }},
		{"delete", func() error { return env.c.DeleteThread(ctx, "acme", "t1") }},
		{"delete another thread", func() error { return env.c.DeleteThread(ctx, "acme", "t2") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
	}
	// Whatever the steps emitted for t1 is queued before this.
	env.g.emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: "end"})

	actor := fmt.Sprintf("uid:%d", os.Getuid())
	want := []struct {
		typ     api.EventType
		message string // a part of it
	}{
		{api.EventThreadBound, "mounted at " + br.MountPath},
		{api.EventThreadClosed, "closed"},
		{api.EventThreadDeleted, ""},
	}
	lines := readLines(t, raw)
	var lastSeq uint64
	for i, w := range want {
		ev := t1.next(t)
		if ev.Type != w.typ || ev.Tenant != "acme" || ev.Thread != "t1" || ev.Actor != actor || !strings.Contains(ev.Message, w.message) {
			t.Errorf("event %d: got %+v, want %s of acme/t1 by %s, message with %q", i, ev, w.typ, actor, w.message)
		}
		if ev.Seq <= lastSeq || ev.Time.IsZero() {
			t.Errorf("event %d: got seq %d after %d, time %v", i, ev.Seq, lastSeq, ev.Time)
		}
		lastSeq = ev.Seq
		select {
		case r := <-lines:
			if r.Seq != ev.Seq || r.Type != ev.Type || !r.Time.Equal(ev.Time) {
				t.Errorf("event %d: the raw stream got %+v, the client %+v", i, r, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d: nothing on the raw stream", i)
		}
	}
	if ev := t1.next(t); ev.Type != testEvent || ev.Message != "end" {
		t.Errorf("got %+v after the thread events, want the end marker: an unchanged bind or close emitted", ev)
	}
}

// TestEventsEscapeRefused: an escape refused by a thread's mount is an
// event of that thread.
func TestEventsEscapeRefused(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	s := follow(t, env.c, "acme", "t1")
	waitSubscribers(t, env.g, 1)
	br, err := env.c.Bind(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if ev := s.next(t); ev.Type != api.EventThreadBound {
		t.Fatalf("got %+v, want thread.bound first", ev)
	}
	err = os.Symlink("/etc/passwd", filepath.Join(br.MountPath, "leak"))
	if !errors.Is(err, syscall.EPERM) {
		t.Fatalf("symlink out of the workspace: got %v, want EPERM", err)
	}
	ev := s.next(t)
	if ev.Type != api.EventEscapeRefused || ev.Tenant != "acme" || ev.Thread != "t1" || ev.Path != "/leak" ||
		!strings.HasPrefix(ev.Message, "symlink of /leak refused: ") || !strings.Contains(ev.Message, `"/etc/passwd"`) {
		t.Errorf("got %+v, want escape.refused of acme/t1 at /leak naming the target", ev)
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

// event decodes d's event from its line.
func (d delivery) event() (api.Event, error) {
	var ev api.Event
	err := json.Unmarshal(d.line, &ev)
	return ev, err
}
