package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/client"
	"warren/gateway"
	"warren/internal/cli"
	"warren/internal/diskimage"
	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/badger"
)

// runDaemon runs a warrend command line (as `warren serve` passes it, or
// without "serve") and returns the exit status and the outputs.
func runDaemon(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, e, args)
	return code, out.String(), errOut.String()
}

// TestServe runs the real serve path (Badger, socket) until its context
// ends, and checks that it said where everything is.
func TestServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	var logs testenv.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, log, serveOptions{dataDir: data, diskImage: diskimage.ModeOff}) }()

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
	code, _, errOut := runDaemon(t, "serve", "--log-level", "loud")
	if code != 2 || !strings.Contains(errOut, "unknown log level") {
		t.Errorf("got exit %d, stderr %q; want 2 and the reason", code, errOut)
	}
	code, _, errOut = runDaemon(t, "serve", "--jail-network", "bridge")
	if code != 2 || !strings.Contains(errOut, "none, egress or host") {
		t.Errorf("--jail-network bridge: exit %d, stderr %q; want 2 and the reason", code, errOut)
	}
	code, _, errOut = runDaemon(t, "serve", "--allow-uid", "x")
	if code != 2 || !strings.Contains(errOut, "not a uid") {
		t.Errorf("got exit %d, stderr %q; want 2 and the reason", code, errOut)
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
		if code, _, errOut := runDaemon(t, args...); code != 2 || !strings.Contains(errOut, c.err) {
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
		{[]string{"--disk-image", "maybe"}, "--disk-image is auto, on or off"},
		{[]string{"--disk-image-size", "-1"}, "--disk-image-size is not negative"},
		{[]string{"--checkpoint-max-entries", "-1"}, "checkpoint limits: entries -1"},
		{[]string{"--checkpoint-max-bytes", "-1"}, "bytes -1 must not be negative"},
		{[]string{"--checkpoint-max-depth", "600"}, "depth 600 must be between 1 and 512"},
		{[]string{"--snapshot-cache-bytes", "1000"}, "snapshot cache bytes 1000 needs a snapshot store"},
		{[]string{"--snapshots", "s3://b?endpoint=127.0.0.1:1", "--snapshot-cache-bytes", "-1"}, "snapshot cache bytes -1 must not be negative"},
		{[]string{"--renew-every", "-1s"}, "renew-every -1s"},
		{[]string{"--renew-every", "1ns"}, "renew-every 1ns"},
		{[]string{"--expires-after", "-1s"}, "expires-after -1s"},
		{[]string{"--renew-every", "10s", "--expires-after", "5s"}, "expires-after 5s"},
		{[]string{"--body-timeout", "-1s"}, "body timeout -1s"},
		{[]string{"--max-uploads", "100,10,8"}, "uploads per uid (10) must be at least twice per thread (8)"},
		{[]string{"--max-conns", "100,200"}, "connections per uid (200) is more than in total (100)"},
		{[]string{"--max-streams", "-1"}, "is not a number of 0 or more"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append([]string{"serve", "--data", data}, c.args...)
			code, _, errOut := runDaemon(t, args...)
			if code != 2 || !strings.Contains(errOut, c.err) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, c.err)
			}
			if _, err := os.Lstat(data); !os.IsNotExist(err) {
				t.Errorf("data folder made before the flags were checked: %v", err)
			}
		})
	}
}

// TestServeJailCPUUsage: a CPU bound serve cannot give is refused at its
// start, with the reason.
func TestServeJailCPUUsage(t *testing.T) {
	for _, c := range []struct{ value, why string }{
		{"0.005", "--jail-cpu is between 0.01 and 1000 CPUs, not 0.005"},
		{"5m", "--jail-cpu is between 0.01 and 1000 CPUs, not 0.005"},
		{"2000", "--jail-cpu is between 0.01 and 1000 CPUs, not 2000"},
		{"half", `"half" is not a number of CPUs`},
	} {
		code, _, errOut := runDaemon(t, "serve", "--data", t.TempDir(), "--jail-cpu", c.value)
		if code != 2 || !strings.Contains(errOut, c.why) {
			t.Errorf("--jail-cpu %s: exit %d, stderr %q; want 2 and %q", c.value, code, errOut, c.why)
		}
	}
}

// TestCloseStoreBounded: a Badger store whose folder was removed under it
// retries its last flush forever; the daemon's close gives up after its
// bound and says so, instead of never exiting.
func TestCloseStoreBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "meta")
	store, err := badger.Open(context.Background(), dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateBinding(context.Background(), meta.Binding{ThreadKey: meta.ThreadKey{Tenant: "default", Thread: "t"}, Kind: meta.KindHost, Root: "/x"}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = closeStore(store, 2*time.Second)
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("closeStore took %v with a bound of 2s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "not closed after 2s") {
		t.Errorf("closeStore of a store that cannot flush: got %v, want it given up after 2s", err)
	}
}

// TestServeSaysEveryBadFlag: with several mistakes in its flags, serve
// says each of them in one go (a value the flag package refuses, one
// serve checks, a flag it does not know, a bound no jail can have), and
// makes nothing.
func TestServeSaysEveryBadFlag(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, _, errOut := runDaemon(t, "serve", "--data", data,
		"--jail-memory", "lots", "--jail-network", "wifi", "--no-such-flag",
		"--log-level", "loud", "--jail-procs", "3", "--store", "zookeeper", "--jail-cpu", "half",
		"--allow-networks", "none,wifi", "--egress-subnet", "8.8.0.0/16", "--egress-allow-private", "mirror",
		"--egress-dns", "dns.example", "--jail-path", "/usr/bin::bin",
		"--jail-image", "Bad Ref!", "--registries", "team/x", "--registry-auth", "/nonexistent/auth.json", "--image-keep", "-1h")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		`invalid value "lots" for flag -jail-memory`,
		"--jail-network is none, egress or host, not \"wifi\"",
		"flag provided but not defined: -no-such-flag",
		`unknown log level "loud"`,
		"jail processes 3",
		"--store is badger or etcd",
		`"half" is not a number of CPUs`,
		"--allow-networks lists none, egress and host, not \"wifi\"",
		"--egress-subnet is a private IPv4 range of /16 to /24, not \"8.8.0.0/16\"",
		"--egress-allow-private is a CIDR, not \"mirror\"",
		"--egress-dns is an IP or IP:port, not \"dns.example\"",
		"--jail-path: jail PATH \"/usr/bin::bin\" has an empty part",
		"--jail-image: ",
		"--registries names registries as host or host:port, not \"team/x\"",
		"--registry-auth: stat /nonexistent/auth.json",
		"--image-keep is a positive duration, not -1h0m0s",
		"mistakes in the flags",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Lstat(data); !os.IsNotExist(err) {
		t.Errorf("data folder made before the flags were checked: %v", err)
	}
}
