package ports

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/jail"
	"warren/meta"
)

// noJails is a Jails that starts none: the tests here never reach a
// jail.
type noJails struct{}

func (noJails) Acquire(context.Context, string, string) (*jail.Jail, meta.ThreadKey, func(), error) {
	return nil, meta.ThreadKey{}, nil, errors.New("no jail in this test")
}

func (noJails) Touch(meta.ThreadKey) {}

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"1", 1, true}, {"3000", 3000, true}, {"65535", 65535, true}, {"08080", 8080, true},
		{"0", 0, false}, {"65536", 0, false}, {"-1", 0, false}, {"+80", 0, false}, {"", 0, false},
		{"80a", 0, false}, {"1e3", 0, false}, {"123456", 0, false}, {" 80", 0, false},
	} {
		got, err := parsePort(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("parsePort(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, api.ErrInvalid) {
			t.Errorf("parsePort(%q) = %d, %v; want an invalid request", tc.in, got, err)
		}
	}
}

func TestIsUpgrade(t *testing.T) {
	for _, tc := range []struct {
		connection, upgrade string
		want                bool
	}{
		{"Upgrade", "tcp", true},
		{"keep-alive, upgrade", "TCP", true},
		{"Upgrade", "websocket", false},
		{"", "tcp", false},
		{"close", "tcp", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/tenants/a/threads/b/ports/80", nil)
		r.Header.Set("Connection", tc.connection)
		r.Header.Set("Upgrade", tc.upgrade)
		if got := IsUpgrade(r); got != tc.want {
			t.Errorf("Connection %q, Upgrade %q: IsUpgrade %v, want %v", tc.connection, tc.upgrade, got, tc.want)
		}
	}
}

// TestChannelRefusesWithoutToken: a channel answers 401 to a request
// without its token, before anything reaches for the jail (this one has
// none, and its dial would fail).
func TestChannelRefusesWithoutToken(t *testing.T) {
	p := New(Config{Jails: noJails{}, Logger: hclog.NewNullLogger()})
	ch, err := newChannel(p, chanKey{meta.ThreadKey{Tenant: "a", Thread: "b"}, 3000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go ch.serve()
	defer ch.close()
	info := ch.info()
	if !strings.HasPrefix(info.URL, "http://127.0.0.1:") || info.Headers["Authorization"] != "Bearer "+info.Token || len(info.Token) != 43 {
		t.Fatalf("channel %+v", info)
	}
	for _, auth := range []string{"", "Bearer", "Bearer " + info.Token[:42], "bearer " + info.Token, info.Token, "Bearer " + info.Token + "x"} {
		req, _ := http.NewRequest(http.MethodGet, info.URL+"/x", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %s; want 401 with WWW-Authenticate", auth, resp.Status)
		}
	}
	ch.close()
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(info.URL, "http://"), time.Second); err == nil {
		t.Errorf("%s accepts connections after close", info.URL)
	}
}

// TestLimitListener: past its bound, a connection waits for one to
// close; Close ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 1)
	defer ln.Close()
	for range 2 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted past the bound")
	case <-time.After(50 * time.Millisecond):
	}
	first.Close()
	second, ok := <-accepted
	if !ok {
		t.Fatal("the second connection was not accepted once the first closed")
	}
	second.Close()

	done := make(chan error, 1)
	held, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, err := ln.Accept(); done <- err }()
	ln.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept waiting for room, after Close: %v; want net.ErrClosed", err)
	}
}

// TestRoomRefusals: a bad port is refused before any jail is asked for;
// Remove of a channel that is not open says so.
func TestRoomRefusals(t *testing.T) {
	p := New(Config{Jails: noJails{}, Logger: hclog.NewNullLogger()})
	ctx := context.Background()
	if _, err := p.Open(ctx, "a", "b", 0); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Open port 0: %v", err)
	}
	if _, err := p.Upgrade(ctx, "a", "b", 70000); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Upgrade port 70000: %v", err)
	}
	k := meta.ThreadKey{Tenant: "a", Thread: "b"}
	if got, err := p.Remove(k, 3000); err != nil || got.Closed || got.Port != 3000 {
		t.Errorf("Remove with none open: %+v, %v", got, err)
	}
	p.Close()
	if p.Count() != 0 {
		t.Errorf("%d channels after Close", p.Count())
	}
}
