package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/fs"
	"warren/gateway"
	"warren/internal/testenv"
	"warren/meta/badger"
)

// startGateway serves a gateway, with its real FUSE mounts, on a socket in
// a temporary folder. When the test ends it closes the gateway and checks
// that nothing it mounted is left: nothing below its data folder, nothing
// at an inspection mount it still has a record of.
func startGateway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	store, err := badger.Open(context.Background(), filepath.Join(dir, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// Registered before Close, so it runs after it (and before the store
	// closes).
	t.Cleanup(func() {
		roots := []string{data}
		ms, err := store.ListInspectionMounts(context.Background())
		if err != nil {
			t.Errorf("list inspection mounts: %v", err)
		}
		for _, m := range ms {
			roots = append(roots, m.Path)
		}
		for _, p := range testenv.MountsUnder(t, roots...) {
			t.Errorf("mount left at %s after the test", p)
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Errorf("detach %s: %v", p, err)
			}
		}
		testenv.UnsealMountPoints(t, data)
	})
	g, err := gateway.Start(context.Background(), gateway.Config{
		DataDir: data,
		Store:   store,
		Logger:  hclog.New(&hclog.LoggerOptions{Output: t.Output(), Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close gateway: %v", err)
		}
	})
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
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	dir, rwDir := t.TempDir(), t.TempDir()
	// mounted returns a check that the mount table lists (or does not
	// list) a mount at *p.
	var bindPath string
	mounted := func(p *string, want bool) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			got, err := fs.IsMountpoint(*p)
			if err != nil || got != want {
				t.Errorf("%s: got mounted %v (%v), want %v", *p, got, err, want)
			}
		}
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string // substring of stdout
		wantErrOut string // substring of stderr
		after      func(t *testing.T)
	}{
		{"bind", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", "", mounted(&bindPath, true)},
		{"bind again", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", "", nil},
		{"bind json", []string{"bind", "--thread", "t-2", "--json"}, 0, `"thread": "t-2"`, "", nil},
		{"bind escape sequence", []string{"bind", "--thread", "a\x1b[31m"}, 0, "/mnt/default/a%1b%5b31m", "", nil},
		{"ls", []string{"ls"}, 0, "acme     ../other-tenant/t-1  bound", "", nil},
		{"ls quotes odd ids", []string{"ls", "--tenant", ""}, 0, `"a\x1b[31m"`, "", nil},
		{"ls one tenant", []string{"ls", "--tenant", "acme", "--json"}, 0, `"tenant": "acme"`, "", nil},
		{"mount", []string{"mount", "--thread", "t-2", dir}, 0, dir + " (read-only)", "", mounted(&dir, true)},
		{"mount flags after DIR", []string{"mount", rwDir, "--thread", "t-2", "--rw"}, 0, "(read-write)", "", mounted(&rwDir, true)},
		{"umount", []string{"umount", dir}, 0, "", "", mounted(&dir, false)},
		{"umount again", []string{"umount", dir}, 1, "", "no inspection mount", nil},
		{"close", []string{"close", "--thread", "t-2"}, 0, "closed default/t-2", "", nil},
		{"close unknown", []string{"close", "--thread", "nobody"}, 1, "", "not bound", nil},
		{"delete", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "deleted acme/../other-tenant/t-1", "", mounted(&bindPath, false)},
		{"delete again", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 1, "", "not bound", nil},
		{"no thread", []string{"bind"}, 2, "", "--thread is required", nil},
		{"unknown flag", []string{"ls", "--bogus"}, 2, "", "flag provided but not defined", nil},
		{"stray argument", []string{"close", "--thread", "t", "extra"}, 2, "", "unexpected arguments", nil},
		{"mount without DIR", []string{"mount", "--thread", "t"}, 2, "", "exactly one DIR", nil},
		{"unknown verb", []string{"frobnicate"}, 2, "", "unknown command", nil},
		{"no verb", nil, 2, "", "usage: warren", nil},
		{"help", []string{"bind", "-h"}, 0, "", "usage: warren bind", nil},
		{"no gateway", []string{"ls", "--socket", filepath.Join(t.TempDir(), "none.sock")}, 1, "", "is 'warren serve' running?", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, sock, tt.args...)
			if tt.name == "bind" {
				bindPath = strings.TrimSuffix(out, "\n")
			}
			if code != tt.wantCode {
				t.Errorf("got exit %d, want %d (stdout %q, stderr %q)", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("got stdout %q, want it to contain %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErrOut) {
				t.Errorf("got stderr %q, want it to contain %q", errOut, tt.wantErrOut)
			}
			if tt.after != nil {
				tt.after(t)
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
	var got []api.ThreadInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil || got == nil || len(got) != 0 {
		t.Errorf("got %q (%v), want an empty JSON list", out, err)
	}
}

// TestServe runs the real serve path (Badger, socket) until its context
// ends, and checks that it said where everything is.
func TestServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	var logs testenv.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, log, serveOptions{dataDir: data}) }()

	sock := api.DefaultSocket(data)
	c := client.New(sock)
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
	code, _, errOut = runCLI(t, "", "serve", "--jail-network", "bridge")
	if code != 2 || !strings.Contains(errOut, "none or host") {
		t.Errorf("--jail-network bridge: exit %d, stderr %q; want 2 and the reason", code, errOut)
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

func TestServeStoreUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"serve", "--store", "zookeeper"}, "--store is badger or etcd"},
		{[]string{"serve", "--store", "etcd"}, "--store etcd needs --etcd-endpoints"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1"}, "--etcd-endpoints needs --store etcd"},
	} {
		args := append(c.args, "--data", filepath.Join(t.TempDir(), "data"))
		if code, _, errOut := runCLI(t, "", args...); code != 2 || !strings.Contains(errOut, c.err) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errOut, c.err)
		}
	}
}

// TestServeBadFlags checks that serve refuses, at start and before it
// makes or opens anything, every number no jail or lease could work with:
// a daemon that started with them would fail every command later.
func TestServeBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--jail-memory", "-1", "--jail-procs", "-5"}, "jail memory -1"},
		{[]string{"--jail-memory", "1000"}, "jail memory 1000 is below"},
		{[]string{"--jail-procs", "-5"}, "jail processes -5"},
		{[]string{"--jail-procs", "3"}, "jail processes 3"},
		{[]string{"--jail-procs", "99999999"}, "jail processes 99999999"},
		{[]string{"--jail-cpu", "-1"}, "-jail-cpu"},
		{[]string{"--disk-quota", "-1"}, "disk quota -1"},
		{[]string{"--disk-quota", "10"}, "disk quota 10 is below"},
		{[]string{"--disk-reserve", "-1"}, "reserve -1"},
		{[]string{"--renew-every", "-1s"}, "renew-every -1s"},
		{[]string{"--renew-every", "1ns"}, "renew-every 1ns"},
		{[]string{"--expires-after", "-1s"}, "expires-after -1s"},
		{[]string{"--renew-every", "10s", "--expires-after", "5s"}, "expires-after 5s"},
		{[]string{"--body-timeout", "-1s"}, "body timeout -1s"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append([]string{"serve", "--data", data}, c.args...)
			code, _, errOut := runCLI(t, "", args...)
			if code != 2 || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, c.err)
			}
			if _, err := os.Lstat(data); !os.IsNotExist(err) {
				t.Errorf("data folder made before the flags were checked: %v", err)
			}
		})
	}
}
