package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/admit"
	"warren/meta"
)

// slowUploadsEnv makes the test binary a client that attempts slow raw
// uploads against one thread (see TestMain and slowUploader): its value
// is "socket,attempts,workers".
const slowUploadsEnv = "WARREN_TEST_SLOW_UPLOADS"

// TestSlowUploadsSpareOtherThreads: a client attempts 2,000 slow uploads
// against thread A (the headers, then a byte every second, each pause
// well under the body timeout), from another process, 64 at a time. With
// the daemon's open-file limit lowered to 4,096 (and its bounds derived
// from it), thread A holds at most its per-thread bound of uploads; every
// other attempt is refused at once with 503 unavailable and Retry-After;
// meanwhile thread B's write and exec and a new thread's bind succeed,
// and the daemon's descriptors stay under 80 % of the limit.
//
// Before package admit every upload was taken, each holding four
// descriptors (its connection, the workspace's and the folder's, its
// temporary file), and the daemon ran out of descriptors.
func TestSlowUploadsSpareOtherThreads(t *testing.T) {
	const (
		nofile   = 4096
		attempts = 2000
		workers  = 64
	)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: nofile, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
	env := startEnv(t, Config{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: t.Output()})})
	want := (admit.Limits{}).WithDefaults(nofile)
	if got := env.g.admit.Limits(); got != want {
		t.Fatalf("limits %+v, want those of %d descriptors: %+v", got, nofile, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, th := range []string{"a", "b"} {
		if _, err := env.c.Bind(ctx, "acme", th); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if code, err := env.c.Exec(ctx, "acme", "b", api.ExecRequest{Command: "true"}, &out, &out); err != nil || code != 0 {
		t.Fatalf("warm exec in b: %d %v %s", code, err, out.String())
	}

	// The daemon's descriptors, sampled all along.
	var maxFds atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
				if n := int64(len(ents)); n > maxFds.Load() {
					maxFds.Store(n)
				}
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d", slowUploadsEnv, env.g.SocketPath(), attempts, workers))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	line := func() string {
		if !lines.Scan() {
			t.Fatalf("the uploader ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := line(); l != "started" {
		t.Fatalf("uploader: %q", l)
	}

	// While the uploads come: thread B writes and runs a command, and a
	// new thread binds, each several times.
	for i := range 5 {
		if _, err := env.c.Files().Write(ctx, "acme", "b", api.WriteFileRequest{Path: fmt.Sprintf("f%d", i), Content: "x\n"}); err != nil {
			t.Errorf("write in b during the uploads: %v", err)
		}
		out.Reset()
		if code, err := env.c.Exec(ctx, "acme", "b", api.ExecRequest{Command: "cat f0"}, &out, &out); err != nil || code != 0 || out.String() != "x\n" {
			t.Errorf("exec in b during the uploads: %d %v %q", code, err, out.String())
		}
		if _, err := env.c.Bind(ctx, "acme", fmt.Sprintf("c%d", i)); err != nil {
			t.Errorf("bind of c%d during the uploads: %v", i, err)
		}
	}
	// Every attempt made: the held ones are still there.
	summary := line()
	held, _ := env.g.admit.Held(admit.Uploads, meta.ThreadKey{Tenant: "acme", Thread: "a"})
	if _, err := env.c.Files().Write(ctx, "acme", "b", api.WriteFileRequest{Path: "last", Content: "x\n"}); err != nil {
		t.Errorf("write in b with every upload attempted: %v", err)
	}
	out.Reset()
	if code, err := env.c.Exec(ctx, "acme", "b", api.ExecRequest{Command: "cat last"}, &out, &out); err != nil || code != 0 {
		t.Errorf("exec in b with every upload attempted: %d %v %q", code, err, out.String())
	}
	close(stopSampling)
	<-sampled
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("uploader: %v", err)
	}

	f := strings.Fields(summary)
	var n [4]int
	for i := range n {
		if len(f) != 4 {
			t.Fatalf("uploader summary %q", summary)
		}
		n[i], _ = strconv.Atoi(f[i])
	}
	tried, refused, taken, bad := n[0], n[1], n[2], n[3]
	t.Logf("%d uploads attempted against one thread: %d refused at once, %d taken (held %d at the end); the daemon's descriptors peaked at %d of %d",
		tried, refused, taken, held, maxFds.Load(), nofile)
	if tried != attempts || bad != 0 {
		t.Errorf("%d attempts, %d answered otherwise than 503 unavailable with Retry-After (see the uploader's errors)", tried, bad)
	}
	if held > want.Uploads.PerThread || taken > want.Uploads.PerThread || taken == 0 {
		t.Errorf("%d uploads taken for one thread (%d held), want 1 to %d", taken, held, want.Uploads.PerThread)
	}
	if peak := maxFds.Load(); peak > nofile*8/10 {
		t.Errorf("the daemon's descriptors peaked at %d, more than 80%% of its limit %d", peak, nofile)
	}
}

// slowUploader attempts slow uploads on sock (spec "socket,attempts,
// workers"): workers at a time, each the headers of a PUT of 1 MiB to
// thread a and one byte. A refusal (503 unavailable, Retry-After) frees
// the worker for the next attempt; an upload taken (no answer within a
// second) is held, a byte a second, until stdin closes. It prints
// "started", then, once every attempt was made, "attempts refused
// taken bad", and returns when stdin closes.
func slowUploader(spec string) int {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad spec", spec)
		return 2
	}
	sock := parts[0]
	attempts, _ := strconv.Atoi(parts[1])
	workers, _ := strconv.Atoi(parts[2])
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()

	var next, refused, taken, bad atomic.Int64
	var wg, holders sync.WaitGroup
	fmt.Println("started")
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(attempts) {
				c, err := net.Dial("unix", sock)
				if err != nil {
					fmt.Fprintf(os.Stderr, "worker %d: dial: %v\n", w, err)
					bad.Add(1)
					continue
				}
				fmt.Fprintf(c, "PUT /v1/tenants/acme/threads/a/files/raw?path=up%d HTTP/1.1\r\nHost: warren\r\nContent-Length: %d\r\n\r\nx", w, 1<<20)
				c.SetReadDeadline(time.Now().Add(time.Second))
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					// Taken: hold it, a byte a second, until the end.
					taken.Add(1)
					holders.Add(1)
					go func() {
						defer holders.Done()
						defer c.Close()
						tick := time.NewTicker(time.Second)
						defer tick.Stop()
						for {
							select {
							case <-stop:
								return
							case <-tick.C:
								c.Write([]byte("x"))
							}
						}
					}()
					continue
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "worker %d: read the answer: %v\n", w, err)
					bad.Add(1)
					c.Close()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				c.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
					!bytes.Contains(body, []byte(`"code":"unavailable"`)) || !bytes.Contains(body, []byte("too many")) {
					fmt.Fprintf(os.Stderr, "worker %d: %s %v %s\n", w, resp.Status, resp.Header, body)
					bad.Add(1)
					continue
				}
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Println(refused.Load()+taken.Load()+bad.Load(), refused.Load(), taken.Load(), bad.Load())
	<-stop
	holders.Wait()
	return 0
}

// TestStreamsBoundedPerThread: event streams of one thread stop at its
// bound with 503 unavailable and Retry-After, while another thread's
// stream and calls go on, and a place comes back when a stream ends.
func TestStreamsBoundedPerThread(t *testing.T) {
	env := startEnv(t, Config{Admission: admit.Limits{Streams: admit.Bound{PerThread: 2}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := unixHTTP(env.g.SocketPath())
	open := func(thread string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://warren/v1/events?tenant=acme&thread="+thread, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("events of %s: %v", thread, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	a1, a2 := open("a"), open("a")
	for _, r := range []*http.Response{a1, a2} {
		if r.StatusCode != http.StatusOK {
			t.Fatalf("a stream within the bound: %s", r.Status)
		}
	}
	over := open("a")
	body, _ := io.ReadAll(over.Body)
	if over.StatusCode != http.StatusServiceUnavailable || over.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), `"code":"unavailable"`) || !strings.Contains(string(body), "too many streams at once for this thread (the limit is 2)") {
		t.Fatalf("a third stream of a: %s Retry-After %q %s", over.Status, over.Header.Get("Retry-After"), body)
	}
	if b := open("b"); b.StatusCode != http.StatusOK {
		t.Fatalf("a stream of b while a is at its bound: %s", b.Status)
	}
	if _, err := env.c.Files().Write(ctx, "acme", "a", api.WriteFileRequest{Path: "x", Content: "x\n"}); err != nil {
		t.Errorf("a call of a while its streams are at their bound: %v", err)
	}
	a1.Body.Close()
	// The place comes back once the server sees the stream end.
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := env.g.admit.Held(admit.Streams, meta.ThreadKey{Tenant: "acme", Thread: "a"}); n >= 2; n, _ = env.g.admit.Held(admit.Streams, meta.ThreadKey{Tenant: "acme", Thread: "a"}) {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams of a still counted after one ended", n)
		}
		time.Sleep(time.Millisecond)
	}
	if r := open("a"); r.StatusCode != http.StatusOK {
		t.Errorf("a stream of a after one ended: %s", r.Status)
	}
}
