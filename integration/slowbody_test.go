package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/gateway/admit"
)

// TestSlowBodies starts 200 clients that send a request's headers and
// then stall in the middle of its body, spread over threads so that no
// thread passes its bound of bodies at once (admit.DefaultBodiesPerThread;
// a ninth on one thread is refused with 503 at once, which the admit
// room's tests show). Each gets 408 and its connection closed once the
// body timeout passes, and the daemon's descriptors come back to what they
// were. A command whose output streams for longer than the body timeout
// is not cut.
func TestSlowBodies(t *testing.T) {
	const (
		clients     = 200
		bodyTimeout = 4 * time.Second
		threads     = clients / admit.DefaultBodiesPerThread
	)
	d := newDaemon(t, "--body-timeout", bodyTimeout.String())
	for i := range threads {
		d.bind("default", fmt.Sprintf("t%d", i))
	}
	d.bind("default", "t")
	pid := d.pid()
	before := countFDs(t, pid)

	conns := make([]net.Conn, 0, clients)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range clients {
		c, err := net.Dial("unix", d.socket)
		if err != nil {
			t.Fatalf("client %d: dial: %v", i, err)
		}
		conns = append(conns, c)
		// The headers promise 1000 bytes; 1 comes.
		fmt.Fprintf(c, "POST /v1/tenants/default/threads/t%d/files/write HTTP/1.1\r\nHost: warren\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", i%threads)
	}
	// Wait until the daemon has accepted them all (bounded). The same
	// slack as below: "before" may have counted a descriptor of the
	// runtime's own or of the bind that is closed by now.
	const slack = 2
	held := countFDs(t, pid)
	for wait := time.Now().Add(bodyTimeout * 3 / 4); held < before+clients-slack && time.Now().Before(wait); held = countFDs(t, pid) {
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("daemon descriptors: %d before, %d with %d stalled clients", before, held, clients)
	if held < before+clients-slack {
		t.Fatalf("daemon holds %d descriptors with %d clients connected, want at least %d", held, clients, before+clients-slack)
	}

	// Every client gets its answer and then the end of the connection.
	start := time.Now()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[int]int{}
		failures []string
	)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(bodyTimeout + 30*time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				_, err = br.ReadByte() // the server closes: EOF
				if err == io.EOF {
					err = nil
				} else if err == nil {
					err = fmt.Errorf("connection still open after the answer")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, fmt.Sprintf("client %d: %v", i, err))
				return
			}
			statuses[resp.StatusCode]++
		}()
	}
	wg.Wait()
	t.Logf("all %d clients answered and closed %v after the last one stalled: statuses %v", clients, time.Since(start).Round(10*time.Millisecond), statuses)
	for _, f := range failures {
		t.Error(f)
	}
	if statuses[http.StatusRequestTimeout] != clients {
		t.Errorf("statuses %v, want %d × 408", statuses, clients)
	}

	// The daemon's descriptors come back: wait for the count, bounded.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := countFDs(t, pid)
		if n <= before+slack {
			t.Logf("daemon descriptors back to %d", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon still holds %d descriptors (%d before the clients)", n, before)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A command that runs past the body timeout streams to its end: the
	// deadline is gone once the request's body was read.
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := fmt.Sprintf("echo start; sleep %d; echo done", int(2*bodyTimeout/time.Second))
	code, err := c.Exec(ctx, "default", "t", api.ExecRequest{Command: cmd}, &out, io.Discard)
	if err != nil || code != 0 || out.String() != "start\ndone\n" {
		t.Errorf("exec past the body timeout: code %d, err %v, output %q; want 0 and start, done", code, err, out.String())
	}
}
