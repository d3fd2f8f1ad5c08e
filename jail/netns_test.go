package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/internal/testenv"
)

// serveInJail starts the echo-server helper in j, listening on addr, and
// returns the port it listens on; the server ends with the test.
func serveInJail(t *testing.T, j *Jail, ws, addr string) int {
	t.Helper()
	bin := installHelper(t, ws)
	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.Run(ctx, Cmd{Args: []string{bin, addr}, Env: helperEnv(t, "echo-server"), Stdout: &out, Stderr: &out})
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, &out, "\n")
	port, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("the server in the jail said %q", out.String())
	}
	return port
}

// greetAndEcho checks that c is the echo server's: a greeting, then its
// own line back.
func greetAndEcho(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("greeting: %q, %v", line, err)
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo: %q, %v", line, err)
	}
}

// TestDialNone: a server on a none jail's own loopback is reached
// through Dial, and not from the host's loopback (the daemon's own
// network), and every thread of the process is back in the daemon's
// network namespace afterwards.
func TestDialNone(t *testing.T) {
	j, ws := startJail(t)
	port := serveInJail(t, j, ws, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 8 {
				c, err := j.Dial(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					t.Error(err)
					return
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				c.Close()
				if err != nil || line != "hello\n" {
					t.Errorf("greeting: %q, %v", line, err)
				}
			}
		})
	}
	wg.Wait()
	c, err := j.Dial(ctx, "tcp", "localhost:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	greetAndEcho(t, c)
	c.Close()

	// The host's loopback has no such server (or another one: never
	// this greeting).
	if hc, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		hc.SetDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(hc).ReadString('\n')
		hc.Close()
		if line == "hello\n" {
			t.Fatalf("the host's loopback reached the jail's server")
		}
	}

	// A port nobody listens on: refused at once.
	if _, err := j.Dial(ctx, "tcp", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("dial a closed port: %v; want connection refused", err)
	}
	checkThreadsInOwnNetNS(t)
}

// checkThreadsInOwnNetNS fails unless every thread of the process is in
// the process's network namespace.
func checkThreadsInOwnNetNS(t *testing.T) {
	t.Helper()
	want, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		got, err := os.Readlink(task)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if got != want {
			t.Errorf("%s is %s; want the process's %s", task, got, want)
		}
	}
}

// TestDialHost: in a host jail Dial reaches the host's network.
func TestDialHost(t *testing.T) {
	j, ws := startJailWith(t, Config{Network: "host"})
	port := serveInJail(t, j, ws, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := j.Dial(ctx, "tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	greetAndEcho(t, c)
	c.Close()
	hc, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("the host jail's server from the host: %v", err)
	}
	greetAndEcho(t, hc)
	hc.Close()
}

// TestDialRefusals: what Dial refuses, and a jail that ended.
func TestDialRefusals(t *testing.T) {
	j, _ := startJail(t)
	ctx := context.Background()
	for _, tc := range []struct{ network, addr, want string }{
		{"tcp", "example.com:80", "IP address"},
		{"tcp", "127.0.0.1:0", "port"},
		{"tcp", "127.0.0.1:65536", "port"},
		{"tcp", "127.0.0.1", "missing port"},
		{"unix", "/tmp/x", "not tcp or udp"},
		{"tcp6", "127.0.0.1:80", "not a tcp6 address"},
		{"tcp4", "[::1]:80", "not a tcp4 address"},
	} {
		if _, err := j.Dial(ctx, tc.network, tc.addr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial(%q, %q): %v; want an error saying %q", tc.network, tc.addr, err, tc.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := j.Dial(cctx, "tcp", "127.0.0.1:80"); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with an ended ctx: %v; want context.Canceled", err)
	}
	j.Close()
	if _, err := j.Dial(ctx, "tcp", "127.0.0.1:80"); !errors.Is(err, ErrInitGone) {
		t.Errorf("Dial after Close: %v; want ErrInitGone", err)
	}
	if err := j.InNetNS(func() error { return nil }); !errors.Is(err, ErrInitGone) {
		t.Errorf("InNetNS after Close: %v; want ErrInitGone", err)
	}
}

// TestInNetNS: what InNetNS makes is the jail's (a listener on the
// jail's loopback that Dial reaches), fn's error comes back, and the
// thread goes back to the daemon's namespace.
func TestInNetNS(t *testing.T) {
	j, _ := startJail(t)
	var ln net.Listener
	err := j.InNetNS(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.WriteString(c, "hello\n")
			io.Copy(c, c)
			c.Close()
		}
	}()
	c, err := j.Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	greetAndEcho(t, c)
	c.Close()
	boom := errors.New("boom")
	if err := j.InNetNS(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("InNetNS: %v; want fn's error", err)
	}
	checkThreadsInOwnNetNS(t)
}
