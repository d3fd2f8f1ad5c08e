package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/gateway"
	"warren/meta"
)

// fakeMounter lets the CLI tests run without FUSE: the gateway's own
// tests cover real mounts.
type fakeMounter struct {
	mu      sync.Mutex
	mounted map[string]bool
}

func (f *fakeMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounted[mountpoint] = true
	return closerFunc(func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.mounted, mountpoint)
		return nil
	}), nil
}

func (f *fakeMounter) DetachStale(string) error { return nil }

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

// startGateway serves a gateway on a socket in a temporary folder.
func startGateway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	store, err := meta.OpenBadger(context.Background(), filepath.Join(dir, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	g, err := gateway.Start(context.Background(), gateway.Config{
		DataDir: filepath.Join(dir, "data"),
		Store:   store,
		Mounter: &fakeMounter{mounted: make(map[string]bool)},
		Logger:  hclog.New(&hclog.LoggerOptions{Output: t.Output(), Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.SocketPath()
}

// runCLI runs a command line against socket and returns the exit status
// and the outputs.
func runCLI(t *testing.T, socket string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &cliEnv{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		if k == "WARREN_SOCKET" {
			return socket
		}
		return ""
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, e, args)
	return code, out.String(), errOut.String()
}

func TestClientVerbs(t *testing.T) {
	sock := startGateway(t)
	dir := t.TempDir()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string // substring of stdout
		wantErrOut string // substring of stderr
	}{
		{"bind", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", ""},
		{"bind again", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", ""},
		{"bind json", []string{"bind", "--thread", "t-2", "--json"}, 0, `"thread": "t-2"`, ""},
		{"bind escape sequence", []string{"bind", "--thread", "a\x1b[31m"}, 0, "/mnt/default/a%1b%5b31m", ""},
		{"ls", []string{"ls"}, 0, "acme     ../other-tenant/t-1  bound", ""},
		{"ls quotes odd ids", []string{"ls", "--tenant", ""}, 0, `"a\x1b[31m"`, ""},
		{"ls one tenant", []string{"ls", "--tenant", "acme", "--json"}, 0, `"tenant": "acme"`, ""},
		{"mount", []string{"mount", "--thread", "t-2", dir}, 0, dir + " (read-only)", ""},
		{"mount flags after DIR", []string{"mount", t.TempDir(), "--thread", "t-2", "--rw"}, 0, "(read-write)", ""},
		{"umount", []string{"umount", dir}, 0, "", ""},
		{"umount again", []string{"umount", dir}, 1, "", "no inspection mount"},
		{"close", []string{"close", "--thread", "t-2"}, 0, "closed default/t-2", ""},
		{"close unknown", []string{"close", "--thread", "nobody"}, 1, "", "not bound"},
		{"delete", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "deleted acme/../other-tenant/t-1", ""},
		{"delete again", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 1, "", "not bound"},
		{"no thread", []string{"bind"}, 2, "", "--thread is required"},
		{"unknown flag", []string{"ls", "--bogus"}, 2, "", "flag provided but not defined"},
		{"stray argument", []string{"close", "--thread", "t", "extra"}, 2, "", "unexpected arguments"},
		{"mount without DIR", []string{"mount", "--thread", "t"}, 2, "", "exactly one DIR"},
		{"unknown verb", []string{"frobnicate"}, 2, "", "unknown command"},
		{"no verb", nil, 2, "", "usage: warren"},
		{"help", []string{"bind", "-h"}, 0, "", "usage: warren bind"},
		{"no gateway", []string{"ls", "--socket", filepath.Join(t.TempDir(), "none.sock")}, 1, "", "is 'warren serve' running?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, sock, tt.args...)
			if code != tt.wantCode {
				t.Errorf("got exit %d, want %d (stdout %q, stderr %q)", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("got stdout %q, want it to contain %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErrOut) {
				t.Errorf("got stderr %q, want it to contain %q", errOut, tt.wantErrOut)
			}
		})
	}
}

func TestLsJSONEmpty(t *testing.T) {
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "ls", "--json")
	if code != 0 {
		t.Fatalf("got exit %d (%s)", code, errOut)
	}
	var got []gateway.ThreadInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil || got == nil || len(got) != 0 {
		t.Errorf("got %q (%v), want an empty JSON list", out, err)
	}
}

// TestServe runs the real serve path (Badger, socket) until its context
// ends, and checks that it said where everything is.
func TestServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	var logs syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, log, serveOptions{dataDir: data}) }()

	sock := gateway.DefaultSocket(data)
	c := gateway.NewClient(sock)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Threads(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			cancel()
			t.Fatalf("gateway did not answer on %s: %v (log: %s)", sock, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	for _, want := range []string{"data=" + data, "socket=" + sock, "mounts=" + filepath.Join(data, "mnt")} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
	}
	if _, err := os.Stat(gateway.MetaDir(data)); err != nil {
		t.Errorf("metadata store not in the data folder: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after serve returned: %v", err)
	}
}

func TestServeUsage(t *testing.T) {
	code, _, errOut := runCLI(t, "", "serve", "--log-level", "loud")
	if code != 2 || !strings.Contains(errOut, "unknown log level") {
		t.Errorf("got exit %d, stderr %q; want 2 and the reason", code, errOut)
	}
	code, _, errOut = runCLI(t, "", "serve", "--allow-uid", "x")
	if code != 2 || !strings.Contains(errOut, "not a uid") {
		t.Errorf("got exit %d, stderr %q; want 2 and the reason", code, errOut)
	}
}

func TestDefaultDataDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got := defaultDataDir(env(map[string]string{"XDG_STATE_HOME": "/st", "HOME": "/h"}))
	want := "/st/warren"
	if os.Geteuid() == 0 {
		want = "/var/lib/warren"
	}
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
