package integration

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// TestVersionStamped builds the programs as make build does and asks
// them what they are: `warren version` gives the client's version and the
// checkout's short hash (as git rev-parse --short HEAD), and exits 0
// whether a daemon answers or not; `warrend --version` adds what the
// kernel offers; a daemon of that build says the same on GET /v1/version,
// and its /healthz carries the revision.
func TestVersionStamped(t *testing.T) {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse (the tests run in a git checkout): %v", err)
	}
	rev := strings.TrimSpace(string(out))
	dir := t.TempDir()
	bin, bind := filepath.Join(dir, "warren"), filepath.Join(dir, "warrend")
	mk := exec.Command("make", "-s", "-C", "..", "build", "BIN="+bin, "BIND="+bind)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}

	sock := filepath.Join(dir, "data", "warren.sock")
	got, err := exec.Command(bin, "version", "--socket", sock).CombinedOutput()
	if err != nil {
		t.Fatalf("warren version with no daemon: %v\n%s", err, got)
	}
	lines := strings.Split(string(got), "\n")
	if !strings.HasPrefix(lines[0], "warren ") || !strings.Contains(lines[0], "(revision "+rev) || !strings.Contains(lines[0], "go1.") {
		t.Errorf("warren version's first line %q: want the version, revision %s and the Go version", lines[0], rev)
	}
	if !strings.Contains(string(got), "daemon: none answers on "+sock) {
		t.Errorf("warren version with no daemon: %q, want it to say none answers", got)
	}
	got, err = exec.Command(bind, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(got), "(revision "+rev) {
		t.Errorf("warrend --version: %v, %q; want revision %s", err, got, rev)
	}
	for _, f := range []string{"passthrough", "fuse io_uring", "landlock", "cgroups"} {
		if !strings.Contains(string(got), "  "+f+" ") {
			t.Errorf("warrend --version lacks the kernel feature %q: %q", f, got)
		}
	}

	// A daemon of that build.
	serve := exec.Command(bin, "serve", "--data", filepath.Join(dir, "data"), "--socket", sock, "--disk-image", "off")
	var logs strings.Builder
	serve.Stdout, serve.Stderr = &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { serve.Wait(); close(exited) }()
	defer func() {
		serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			serve.Process.Kill()
			<-exited
		}
	}()
	c := client.New(sock)
	defer c.CloseIdleConnections()
	var v api.Version
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err = c.Version(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never answered: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v.Revision != rev || v.GoVersion == "" || len(v.Kernel) != 4 {
		t.Errorf("GET /v1/version: %+v, want revision %s and 4 kernel features", v, rev)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://warren/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Revision != rev {
		t.Errorf("/healthz: %+v, %v; want revision %s", h, err, rev)
	}
	got, err = exec.Command(bin, "version", "--socket", sock).CombinedOutput()
	if err != nil || !strings.Contains(string(got), "daemon: warrend ") || !strings.Contains(string(got), "landlock") {
		t.Errorf("warren version with a daemon: %v, %q", err, got)
	}
}
