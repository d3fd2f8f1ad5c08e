package admit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/meta"
)

func th(n int) meta.ThreadKey { return meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprintf("t%d", n)} }

func TestEnterBounds(t *testing.T) {
	a := New(Limits{Uploads: Bound{Total: 10, PerUID: 6, PerThread: 3}}, 1024)
	var held []*Ticket
	enter := func(uid uint32, k meta.ThreadKey) error {
		tk, err := a.Enter(Uploads, uid, k)
		if err == nil {
			held = append(held, tk)
		}
		return err
	}
	for i := 0; i < 3; i++ {
		if err := enter(1, th(1)); err != nil {
			t.Fatalf("upload %d of thread 1: %v", i, err)
		}
	}
	var le *LimitError
	if err := enter(1, th(1)); !errors.As(err, &le) || le.Scope != "for this thread" || le.Max != 3 || !errors.Is(err, ErrLimit) {
		t.Fatalf("fourth upload of thread 1: %v, want the per-thread bound", err)
	}
	if !strings.Contains(le.Error(), "too many uploads at once for this thread (the limit is 3)") {
		t.Errorf("message %q does not name the limit", le.Error())
	}
	// Another thread of the same uid still gets in, up to the uid's bound.
	for i := 0; i < 3; i++ {
		if err := enter(1, th(2)); err != nil {
			t.Fatalf("upload %d of thread 2: %v", i, err)
		}
	}
	if err := enter(1, th(3)); !errors.As(err, &le) || le.Scope != "by uid 1" {
		t.Fatalf("uid 1's seventh upload: %v, want the per-uid bound", err)
	}
	for i := 0; i < 4; i++ {
		if err := enter(uint32(2+i%2), th(10+i)); err != nil {
			t.Fatalf("upload of uid %d: %v", 2+i%2, err)
		}
	}
	if err := enter(4, th(20)); !errors.As(err, &le) || le.Scope != "in total" || le.Max != 10 {
		t.Fatalf("eleventh upload: %v, want the total bound", err)
	}
	// Release gives places back, once however often it is called.
	held[0].Release()
	held[0].Release()
	if n, total := a.Held(Uploads, th(1)); n != 2 || total != 9 {
		t.Errorf("after one release: thread 1 holds %d, total %d; want 2, 9", n, total)
	}
	if err := enter(1, th(1)); err != nil {
		t.Errorf("upload after a release: %v", err)
	}
	for _, tk := range held {
		tk.Release()
	}
	for _, u := range a.Usage() {
		if u.Held != 0 {
			t.Errorf("%s: %d held after every release", u.Kind, u.Held)
		}
	}
	if u := a.Usage()[Uploads]; u.Refused != 3 {
		t.Errorf("uploads refused: %d, want 3", u.Refused)
	}
	if len(a.count[Uploads].threads) != 0 || len(a.count[Uploads].uids) != 0 {
		t.Errorf("counters left behind: %v %v", a.count[Uploads].threads, a.count[Uploads].uids)
	}
}

// TestOneThreadCannotStarveAnother: with the defaults of any open-file
// limit, one uid's thread at every per-thread bound leaves room in every
// per-uid and total bound for another thread of the same uid.
func TestOneThreadCannotStarveAnother(t *testing.T) {
	for _, nofile := range []uint64{256, 1024, 20_000, 1 << 20} {
		t.Run(fmt.Sprint(nofile), func(t *testing.T) {
			l := Limits{}
			if err := l.Check(nofile); err != nil {
				t.Fatalf("defaults refused: %v", err)
			}
			a := New(l, nofile)
			// Thread 1 fills every kind to its own bound, and holds a
			// connection per request.
			for k := Requests; k < numKinds; k++ {
				for {
					if _, err := a.Enter(k, 1000, th(1)); err != nil {
						var le *LimitError
						if !errors.As(err, &le) || le.Scope != "for this thread" {
							t.Fatalf("%s: thread 1 stopped by %v, want its own bound", k, err)
						}
						break
					}
					if k != Bodies {
						if _, err := a.Enter(Conns, 1000, meta.ThreadKey{}); err != nil {
							t.Fatalf("thread 1's connection: %v", err)
						}
					}
				}
			}
			if _, err := a.Enter(Conns, 1000, meta.ThreadKey{}); err != nil {
				t.Errorf("thread 2's connection: %v", err)
			}
			for k := Requests; k < numKinds; k++ {
				if _, err := a.Enter(k, 1000, th(2)); err != nil {
					t.Errorf("thread 2's %s: %v", k, err)
				}
			}
		})
	}
}

func TestDefaultsFromFileLimit(t *testing.T) {
	l := Limits{}.WithDefaults(20_000)
	if l.Conns.Total != 2500 || l.Conns.PerUID != 1875 {
		t.Errorf("connections at 20000 descriptors: %+v, want 2500 in total, 1875 per uid", l.Conns)
	}
	if l.Uploads.Total != 625 || l.Uploads.PerThread != DefaultUploadsPerThread {
		t.Errorf("uploads at 20000 descriptors: %+v", l.Uploads)
	}
	// What the API holds at its bounds stays within a fifth of the limit:
	// a descriptor per connection, one more per upload.
	if fds := l.Conns.Total + l.Uploads.Total; fds > 20_000/5 {
		t.Errorf("the API may hold %d descriptors of 20000", fds)
	}
	if big := (Limits{}).WithDefaults(1 << 30); big.Conns.Total != 1<<15 {
		t.Errorf("connections at a huge limit: %d, want the ceiling %d", big.Conns.Total, 1<<15)
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		l    Limits
		want string
	}{
		{Limits{}, ""},
		{Limits{Uploads: Bound{Total: 100, PerUID: 10, PerThread: 6}}, "uploads per uid (10) must be at least twice per thread (6)"},
		{Limits{Streams: Bound{Total: 10, PerUID: 20}}, "streams per uid (20) is more than in total (10)"},
		{Limits{Conns: Bound{Total: 500, PerUID: 50}}, "connections per uid (50) must be at least twice"},
		{Limits{Bodies: Bound{PerThread: -1}}, "none may be negative"},
	} {
		err := c.l.Check(20_000)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Check(%+v) = %v, want %q", c.l, err, c.want)
		}
	}
}

// TestListenerRefuses: a connection past the bound gets a 503 with
// Retry-After at once, not a hang; one that closes gives its place back.
func TestListenerRefuses(t *testing.T) {
	a := New(Limits{Conns: Bound{Total: 2, PerUID: 2}, Requests: Bound{PerThread: 1}, Uploads: Bound{PerThread: 0}, Streams: Bound{PerThread: 0}}, 1024)
	sock := filepath.Join(t.TempDir(), "s")
	raw, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var refusals int
	refused := make(chan struct{}, 10)
	ln := a.Listener(raw, func(net.Conn) (uint32, bool) { return 7, true }, func(uid uint32, err error) {
		refusals++
		refused <- struct{}{}
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	get := func(c net.Conn) *http.Response {
		t.Helper()
		if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("send: %v", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		return resp
	}
	c1, c2 := dial(), dial()
	for _, c := range []net.Conn{c1, c2} {
		if resp := get(c); resp.StatusCode != 200 {
			t.Fatalf("connection within the bound: %s", resp.Status)
		}
	}
	resp := get(dial())
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("third connection: %s, Retry-After %q; want 503, 1", resp.Status, resp.Header.Get("Retry-After"))
	}
	var body strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&body)
	if !strings.Contains(body.String(), `"code":"unavailable"`) || !strings.Contains(body.String(), "too many connections at once by uid 7 (the limit is 2)") {
		t.Errorf("refusal body: %s", body.String())
	}
	<-refused
	c1.Close()
	// The place comes back once the server sees the close.
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	// The server notices the close with its next read: wait for the
	// counter to say so.
	deadline := time.Now().Add(10 * time.Second)
	for _, n := a.Held(Conns, meta.ThreadKey{}); n >= 2; _, n = a.Held(Conns, meta.ThreadKey{}) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still held after a close", n)
		}
		time.Sleep(time.Millisecond)
	}
	r, err := cl.Get("http://x/")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("after a close: %v %v", r, err)
	}
	r.Body.Close()
}
