package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
	"warren/meta"
)

// portServer is a server the tests run in a jail (python3, from the
// host's /usr): GET answers the request's path and headers as JSON, a
// WebSocket upgrade echoes every message, and each request's path goes
// to stdout, so a test sees which requests reached the jail.
const portServer = `import base64, hashlib, http.server, json, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        print("request", self.path, flush=True)
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        self.close_connection = True
        key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = int.from_bytes(r.read(2), "big")
            elif n == 127:
                n = int.from_bytes(r.read(8), "big")
            mask = r.read(4) if h[1] & 0x80 else bytes(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(b"\x88\x00")
                w.flush()
                return
            size = bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big")
            w.write(bytes([0x80 | op]) + size + data)
            w.flush()

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// startPortServer writes portServer into the thread's workspace and
// spawns it as a job listening on port; it returns the job's id.
func startPortServer(t *testing.T, c *client.Client, tenant, thread string, port int) string {
	t.Helper()
	ctx := t.Context()
	if _, err := c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: "portserver.py", Content: portServer}); err != nil {
		t.Fatal(err)
	}
	job, err := c.Spawn(ctx, tenant, thread, api.SpawnRequest{Command: fmt.Sprintf("exec python3 -u portserver.py %d", port)})
	if err != nil {
		t.Fatal(err)
	}
	return job.ID
}

// jobOutput returns what a job wrote so far.
func jobOutput(t *testing.T, c *client.Client, tenant, thread, id string) string {
	t.Helper()
	var out strings.Builder
	err := c.JobOutput(t.Context(), tenant, thread, id, 0, false, func(f api.JobFrame) error {
		out.WriteString(f.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// channelGet sends GET path to the channel with headers (nil: the
// channel's own), and returns the status and body.
func channelGet(t *testing.T, hc *http.Client, ch api.PortChannel, path string, headers map[string]string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ch.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if headers == nil {
		headers = ch.Headers
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitServing waits until GET path through ch is answered 200 (the
// jail's server is up), and returns the body.
func waitServing(t *testing.T, hc *http.Client, ch api.PortChannel, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body, err := channelGet(t, hc, ch, path, nil)
		if err == nil && status == http.StatusOK {
			return body
		}
		if err == nil && status != http.StatusBadGateway {
			t.Fatalf("GET %s through the channel: %d %q", path, status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the jail's server did not answer through the channel in 30 s: %d %q %v", status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGone waits until the channel's URL refuses connections.
func waitGone(t *testing.T, ch api.PortChannel) {
	t.Helper()
	u, err := url.Parse(ch.URL)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial %s: %v; want connection refused", u.Host, err)
			}
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections", ch.URL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wsEcho sends msg over a WebSocket to path through the channel and
// returns the echo.
func wsEcho(t *testing.T, ch api.PortChannel, path, msg string) string {
	t.Helper()
	u, err := url.Parse(ch.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var nonce [16]byte
	rand.Read(nonce[:])
	key := base64.StdEncoding.EncodeToString(nonce[:])
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", path, u.Host, key)
	for k, v := range ch.Headers {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("WebSocket handshake: %s, accept %q", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	if len(msg) > 125 {
		t.Fatal("wsEcho sends short messages only")
	}
	mask := [4]byte{7, 1, 2, 9}
	frame := append([]byte{0x81, 0x80 | byte(len(msg))}, mask[:]...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		t.Fatal(err)
	}
	if head[0] != 0x81 || head[1] > 125 {
		t.Fatalf("echo frame header % x; want an unmasked short text frame", head)
	}
	data := make([]byte, head[1])
	if _, err := io.ReadFull(br, data); err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestPorts: a python3 -m http.server in a thread's jail (network none)
// is fetched through the port's channel; the channel is the same at a
// second POST; a request without the token, or with another, is
// refused (401) and never reaches the jail, and the token is not
// forwarded; a WebSocket echoes through it; and plain TCP goes through
// the API socket.
func TestPorts(t *testing.T) {
	testenv.RequireCommand(t, "/usr/bin/python3")
	env := startEnv(t, Config{})
	ctx := t.Context()
	const tenant, thread = "acme", "dev-server"
	if _, err := env.c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: "site/index.html", Content: "hello from the jail\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.Spawn(ctx, tenant, thread, api.SpawnRequest{Command: "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory site"}); err != nil {
		t.Fatal(err)
	}
	ch, err := env.c.OpenPort(ctx, tenant, thread, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ch.URL, "http://127.0.0.1:") || len(ch.Token) < 40 || ch.Headers["Authorization"] != "Bearer "+ch.Token || ch.Port != 8000 {
		t.Fatalf("channel %+v; want a loopback URL and its bearer token", ch)
	}
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	t.Cleanup(hc.CloseIdleConnections)
	if body := waitServing(t, hc, ch, "/index.html"); body != "hello from the jail\n" {
		t.Errorf("GET /index.html through the channel: %q", body)
	}
	again, err := env.c.OpenPort(ctx, tenant, thread, 8000)
	if err != nil || again.URL != ch.URL || again.Token != ch.Token {
		t.Errorf("a second POST: %+v, %v; want the same channel %+v", again, err, ch)
	}

	// The headers server, in the same jail.
	job := startPortServer(t, env.c, tenant, thread, 8001)
	hch, err := env.c.OpenPort(ctx, tenant, thread, 8001)
	if err != nil {
		t.Fatal(err)
	}
	if hch.URL == ch.URL || hch.Token == ch.Token {
		t.Fatalf("two ports share a channel: %+v, %+v", ch, hch)
	}
	var seen struct {
		Path    string            `json:"path"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(waitServing(t, hc, hch, "/first")), &seen); err != nil {
		t.Fatal(err)
	}
	for k := range seen.Headers {
		if strings.EqualFold(k, "Authorization") {
			t.Errorf("the jail's server got the channel's token: %v", seen.Headers)
		}
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
	}{
		{"no token", map[string]string{}},
		{"another channel's token", ch.Headers},
		{"the token without Bearer", map[string]string{"Authorization": hch.Token}},
		{"a prefix of the token", map[string]string{"Authorization": "Bearer " + hch.Token[:20]}},
	} {
		status, body, err := channelGet(t, hc, hch, "/refused-"+strings.ReplaceAll(tc.name, " ", "-"), tc.headers)
		if err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s: %d %q %v; want 401", tc.name, status, body, err)
		}
	}
	if got := wsEcho(t, hch, "/ws", "ping through the channel"); got != "ping through the channel" {
		t.Errorf("WebSocket echo: %q", got)
	}
	// The last request, with the token, went through: the refused ones,
	// sent before it, would show before it.
	waitServing(t, hc, hch, "/last")
	out := jobOutput(t, env.c, tenant, thread, job)
	if strings.Contains(out, "refused") || !strings.Contains(out, "request /first") || !strings.Contains(out, "request /ws") || !strings.Contains(out, "request /last") {
		t.Errorf("the jail's server saw:\n%s\nwant /first, /ws and /last, and none of the refused requests", out)
	}

	// Plain TCP, through the API socket.
	tc, err := env.c.DialPort(ctx, tenant, thread, 8001)
	if err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(tc, "GET /tcp HTTP/1.1\r\nHost: jail\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	tc.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"/tcp"`) {
		t.Errorf("GET over plain TCP: %s %q", resp.Status, body)
	}
	if _, err := env.c.DialPort(ctx, tenant, thread, 8002); !errors.Is(err, api.ErrConflict) {
		t.Errorf("plain TCP to a port nobody listens on: %v; want a conflict", err)
	}
}

// TestPortsGone: a channel is gone (its URL refuses connections) after
// its DELETE, after its thread's close, after its jail is reclaimed for
// being idle and after its jail is ended from the gateway (the bound, a
// restore with force); a plain TCP connection is cut with it.
func TestPortsGone(t *testing.T) {
	testenv.RequireCommand(t, "/usr/bin/python3")
	env := startEnv(t, Config{})
	ctx := t.Context()
	const tenant = "acme"

	t.Run("delete", func(t *testing.T) {
		ch, err := env.c.OpenPort(ctx, tenant, "delete", 8000)
		if err != nil {
			t.Fatal(err)
		}
		got, err := env.c.ClosePort(ctx, tenant, "delete", 8000)
		if err != nil || !got.Closed || got.Port != 8000 {
			t.Fatalf("ClosePort: %+v, %v", got, err)
		}
		waitGone(t, ch)
		if got, err := env.c.ClosePort(ctx, tenant, "delete", 8000); err != nil || got.Closed {
			t.Errorf("a second ClosePort: %+v, %v; want closed false", got, err)
		}
		again, err := env.c.OpenPort(ctx, tenant, "delete", 8000)
		if err != nil || again.URL == ch.URL || again.Token == ch.Token {
			t.Errorf("a POST after the DELETE: %+v, %v; want a new channel", again, err)
		}
	})
	t.Run("close thread", func(t *testing.T) {
		startPortServer(t, env.c, tenant, "close", 8001)
		ch, err := env.c.OpenPort(ctx, tenant, "close", 8001)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{}}
		defer hc.CloseIdleConnections()
		waitServing(t, hc, ch, "/")
		tc, err := env.c.DialPort(ctx, tenant, "close", 8001)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if _, err := env.c.CloseThread(ctx, tenant, "close"); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ch)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if n, err := tc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || n > 0 {
			t.Errorf("a plain TCP connection after the thread's close: read %d, %v; want its end", n, err)
		}
	})
	t.Run("idle reclaim", func(t *testing.T) {
		if _, err := env.c.BindWith(ctx, tenant, "idle", meta.Settings{JailIdleSeconds: 1}); err != nil {
			t.Fatal(err)
		}
		ch, err := env.c.OpenPort(ctx, tenant, "idle", 8002)
		if err != nil {
			t.Fatal(err)
		}
		waitGone(t, ch)
		if env.g.jails.JailOf(meta.ThreadKey{Tenant: tenant, Thread: "idle"}) != nil {
			t.Errorf("the channel closed, but the jail runs")
		}
	})
	t.Run("jail ended", func(t *testing.T) {
		ch, err := env.c.OpenPort(ctx, tenant, "ended", 8003)
		if err != nil {
			t.Fatal(err)
		}
		env.g.jails.CloseJail(meta.ThreadKey{Tenant: tenant, Thread: "ended"})
		waitGone(t, ch)
	})
	if n := env.g.ports.Count(); n != 1 {
		t.Errorf("%d channels open; want the one opened after the DELETE", n)
	}
}

// TestPortsRefusals: a port outside 1..65535 is a 400; past the bound of
// channels per thread a POST is refused until one closes.
func TestPortsRefusals(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := t.Context()
	for _, port := range []string{"0", "65536", "-1", "+80", "http", "1e3", "800000000000"} {
		r := rawRequest(t, env.g.SocketPath(), http.MethodPost, "/v1/tenants/acme/threads/t/ports/"+port, nil)
		if r.status != http.StatusBadRequest || r.apiError(t).Code != api.CodeInvalid {
			t.Errorf("POST .../ports/%s: %d %s; want 400 invalid", port, r.status, r.body)
		}
	}
	// The refusals bound nothing.
	if env.g.jails.Count() != 0 {
		t.Errorf("a refused port started a jail")
	}
	for port := 1; port <= 64; port++ {
		if _, err := env.c.OpenPort(ctx, "acme", "many", port); err != nil {
			t.Fatalf("channel %d: %v", port, err)
		}
	}
	_, err := env.c.OpenPort(ctx, "acme", "many", 65)
	if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "64 port channels") {
		t.Errorf("the 65th channel: %v; want a conflict naming the bound", err)
	}
	// Another thread has its own bound.
	if _, err := env.c.OpenPort(ctx, "acme", "other", 65); err != nil {
		t.Errorf("another thread's channel: %v", err)
	}
	if _, err := env.c.OpenPort(ctx, "acme", "many", 1); err != nil {
		t.Errorf("an open channel again at the bound: %v", err)
	}
	if _, err := env.c.ClosePort(ctx, "acme", "many", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.OpenPort(ctx, "acme", "many", 65); err != nil {
		t.Errorf("a channel after one closed: %v", err)
	}
}
