package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/gateway/events"
	"warren/internal/testenv"
)

// testEvent is a kind of event that only tests emit.
const testEvent api.EventType = "test.tick"

// waitSubscribers waits until g's events have n subscribers: a stream
// subscribes before it answers, but a Client.Events caller cannot see when
// that happened.
func waitSubscribers(t *testing.T, g *Gateway, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := g.events.Stats()
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
	s := &stream{events: make(chan api.Event, 4*events.DefaultBuffer), cancel: cancel}
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
				env.g.events.Emit(api.Event{Type: testEvent, Tenant: k[0], Thread: k[1], Message: strconv.Itoa(i)})
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
		env.g.events.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: big})
	}
	env.g.events.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t2"})
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
	env.g.events.Emit(api.Event{Type: testEvent}) // after Close: dropped, no panic
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
	env.g.events.Emit(api.Event{Type: testEvent, Tenant: "acme", Thread: "t1", Message: "end"})

	actor := fmt.Sprintf("uid:%d", os.Getuid())
	want := []struct {
		typ     api.EventType
		message string // a part of it
	}{
		{api.EventThreadBound, "mounted at " + br.MountPath},
		{api.EventThreadClosed, "closed"},
		{api.EventThreadDeleted, ""},
	}
	lines := testenv.EventLines(t, raw.Body)
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
