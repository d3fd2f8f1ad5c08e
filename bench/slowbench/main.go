// Command slowbench attempts many slow raw uploads against one thread of
// a running daemon while another thread writes, binds and runs commands,
// and prints what the daemon held (bench/slowuploads.sh runs it).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"warren/api"
	"warren/client"
)

func main() {
	sock := flag.String("socket", "", "the daemon's socket")
	pid := flag.Int("pid", 0, "the daemon's pid, to count its descriptors")
	attempts := flag.Int("uploads", 10000, "slow uploads attempted against thread a")
	workers := flag.Int("workers", 256, "uploads attempted at once")
	every := flag.Duration("every", 3*time.Second, "a byte of each held upload this often (under the body timeout)")
	flag.Parse()
	if err := run(*sock, *pid, *attempts, *workers, *every); err != nil {
		fmt.Fprintln(os.Stderr, "slowbench:", err)
		os.Exit(1)
	}
}

func countFds(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

func fileLimit(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			return strings.Fields(l)[3]
		}
	}
	return "?"
}

func run(sock string, pid, attempts, workers int, every time.Duration) error {
	ctx := context.Background()
	c := client.New(sock)
	for _, th := range []string{"a", "b"} {
		if _, err := c.Bind(ctx, "acme", th); err != nil {
			return fmt.Errorf("bind %s: %w", th, err)
		}
	}
	base := countFds(pid)
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			if n := int64(countFds(pid)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	var next, refused, taken, bad atomic.Int64
	var wg sync.WaitGroup
	held := make(chan net.Conn, attempts)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(attempts) {
				conn, err := net.Dial("unix", sock)
				if err != nil {
					bad.Add(1)
					continue
				}
				fmt.Fprintf(conn, "PUT /v1/tenants/acme/threads/a/files/raw?path=up%d HTTP/1.1\r\nHost: warren\r\nContent-Length: %d\r\n\r\nx", w, 1<<20)
				conn.SetReadDeadline(time.Now().Add(time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					taken.Add(1)
					held <- conn
					continue
				}
				if err != nil {
					bad.Add(1)
					conn.Close()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				conn.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"unavailable"`)) {
					refused.Add(1)
				} else {
					bad.Add(1)
				}
			}
		}()
	}
	// Held uploads get a byte every so often.
	go func() {
		var conns []net.Conn
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case cn := <-held:
				conns = append(conns, cn)
			case <-tick.C:
				for _, cn := range conns {
					cn.Write([]byte("x"))
				}
			case <-stop:
				for _, cn := range conns {
					cn.Close()
				}
				return
			}
		}
	}()
	// Thread b, meanwhile.
	var okB, failB int
	var firstErr error
	for i := 0; next.Load() < int64(attempts) || i < 3; i++ {
		if _, err := c.Files().Write(ctx, "acme", "b", api.WriteFileRequest{Path: "f", Content: "x\n"}); err != nil {
			failB++
			firstErr = cmpErr(firstErr, err)
		} else {
			okB++
		}
		if _, err := c.Bind(ctx, "acme", fmt.Sprintf("c%d", i)); err != nil {
			failB++
			firstErr = cmpErr(firstErr, err)
		} else {
			okB++
		}
		var out bytes.Buffer
		if code, err := c.Exec(ctx, "acme", "b", api.ExecRequest{Command: "cat f"}, &out, &out); err != nil || code != 0 {
			failB++
			firstErr = cmpErr(firstErr, fmt.Errorf("exec: %d %v", code, err))
		} else {
			okB++
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	during := countFds(pid)
	close(stop)
	fmt.Printf("uploads attempted against thread a: %d in %v (%d at once)\n", attempts, elapsed.Round(time.Millisecond), workers)
	fmt.Printf("  refused at once (503 unavailable): %d\n  taken and held:                   %d\n  other answers or errors:          %d\n", refused.Load(), taken.Load(), bad.Load())
	fmt.Printf("thread b meanwhile (write, bind of a new thread, exec): %d succeeded, %d failed\n", okB, failB)
	if firstErr != nil {
		fmt.Printf("  first failure: %v\n", firstErr)
	}
	fmt.Printf("daemon descriptors: %d before, %d peak, %d with every upload attempted; open-file limit %s\n", base, peak.Load(), during, fileLimit(pid))
	if failB > 0 || bad.Load() > 0 {
		return fmt.Errorf("%d of thread b's calls failed, %d uploads answered otherwise", failB, bad.Load())
	}
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
