package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warren/api"
)

// The transport against net/http's server, the daemon's, on a Unix socket,
// and against a raw one that answers whatever bytes a case needs.

// httpServer serves h on a Unix socket of its own until the test ends,
// and counts the connections it accepted.
func httpServer(t *testing.T, h http.Handler) (socket string, conns *atomic.Int64) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return socket, conns
}

// rawServer answers each connection's first request with answer, then
// closes it.
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				io.WriteString(c, answer)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return socket
}

func TestTransportChunkedAnswerAndReuse(t *testing.T) {
	socket, conns := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Flushed in pieces: net/http sends it chunked.
		for i := range 3 {
			io.WriteString(w, strings.Repeat(string(rune('a'+i)), 5000))
			w.(http.Flusher).Flush()
		}
	}))
	c := New(socket)
	defer c.CloseIdleConnections()
	for range 5 {
		got, err := c.Metrics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.Repeat("a", 5000) + strings.Repeat("b", 5000) + strings.Repeat("c", 5000); got != want {
			t.Fatalf("body of %d bytes, want %d", len(got), len(want))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("five calls in a row used %d connections, want 1 (reuse)", n)
	}
}

func TestTransportErrorAnswer(t *testing.T) {
	socket, _ := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no thread t"}}`)
	}))
	_, err := New(socket).Thread(t.Context(), "", "t")
	if !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("error %v, want one matching api.ErrNotFound", err)
	}
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("error %#v, want an *api.APIError with status 404", err)
	}
}

// A body of unknown length goes chunked and arrives whole; one of known
// length goes with its Content-Length.
func TestTransportRequestBodies(t *testing.T) {
	type seen struct {
		length int64
		te     []string
		body   []byte
	}
	got := make(chan seen, 1)
	socket, _ := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.ContentLength, r.TransferEncoding, b}
		io.WriteString(w, `{"path":"f","size":1,"version":2}`)
	}))
	c := New(socket)
	defer c.CloseIdleConnections()
	content := bytes.Repeat([]byte("0123456789"), 20_000)
	for _, tc := range []struct {
		name    string
		r       io.Reader
		chunked bool
	}{
		{"unknown length", io.MultiReader(bytes.NewReader(content[:1000]), bytes.NewReader(content[1000:])), true},
		{"bytes.Reader", bytes.NewReader(content), false},
	} {
		if _, err := c.Files().WriteRaw(t.Context(), "", "t", api.RawRequest{Path: "f"}, tc.r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := <-got
		if !bytes.Equal(s.body, content) {
			t.Errorf("%s: the server got %d bytes, want %d", tc.name, len(s.body), len(content))
		}
		if chunked := len(s.te) == 1 && s.te[0] == "chunked"; chunked != tc.chunked || (!tc.chunked && s.length != int64(len(content))) {
			t.Errorf("%s: Content-Length %d, Transfer-Encoding %v", tc.name, s.length, s.te)
		}
	}
}

// A daemon that refuses a body before it read it all (a quota) is heard:
// the answer is its error, not a broken write.
func TestTransportEarlyRefusal(t *testing.T) {
	socket, _ := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.CopyN(io.Discard, r.Body, 1000)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, `{"error":{"code":"quota","message":"over the quota"}}`)
	}))
	// Endless: only the refusal ends the call.
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := pw.Write(buf); err != nil {
				return
			}
		}
	}()
	defer pr.Close()
	_, err := New(socket).Files().WriteRaw(t.Context(), "", "t", api.RawRequest{Path: "f"}, pr)
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("error %v, want the daemon's 413", err)
	}
}

// Answers broken in every way end in an error, never a hang or a wrong
// body.
func TestTransportMalformedAnswers(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n# short"},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n"},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n"},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
		{"chunk without CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n"},
		{"chunked cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"},
		{"header without colon", "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n"},
		{"huge header", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("x", maxHeaderBytes+10) + "\r\n\r\n"},
		{"no answer", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, err := New(rawServer(t, tc.answer)).Metrics(ctx)
			if err == nil {
				t.Fatalf("no error; body %q", got)
			}
			if ctx.Err() != nil {
				t.Fatalf("the call hung until its deadline: %v", err)
			}
		})
	}
	// And one well formed, with a chunk extension and a trailer.
	got, err := New(rawServer(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n")).Metrics(t.Context())
	if err != nil || got != "abcde" {
		t.Fatalf("well-formed chunked answer: %q, %v", got, err)
	}
}

// A context that ends during a streaming answer ends the call at once,
// with the context's error.
func TestTransportContextEndsStream(t *testing.T) {
	release := make(chan struct{})
	socket, _ := httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "{}\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		errc <- New(socket).Events(ctx, "", "", func(api.Event) error { close(first); return nil })
	}()
	<-first
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream went on after its context ended")
	}
}

// A kept connection to a daemon that went away (a restart on the same
// socket) is not used: the next call, a POST too, reaches the new daemon.
func TestTransportDaemonRestarted(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "s.sock")
	serve := func(name string) (stop func()) {
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, `{"binding":{"thread":"`+name+`"}}`)
		})}
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(l) }()
		return func() { srv.Close(); <-done }
	}
	stop := serve("first")
	c := New(socket)
	defer c.CloseIdleConnections()
	for _, call := range []func() (string, error){
		func() (string, error) { b, err := c.Thread(t.Context(), "", "t"); return b.Thread, err },
		func() (string, error) { b, err := c.CloseThread(t.Context(), "", "t"); return b.Thread, err },
	} {
		if got, err := call(); err != nil || got != "first" {
			t.Fatalf("first daemon: %q, %v", got, err)
		}
		stop() // its kept connection is closed with it
		stop = serve("second")
		if got, err := call(); err != nil || got != "second" {
			t.Fatalf("after a restart: %q, %v", got, err)
		}
		stop()
		stop = serve("first")
	}
	stop()
}
