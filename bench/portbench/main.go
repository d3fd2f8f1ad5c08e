// Command portbench measures the ports' channels: requests per second
// through a port's channel (the daemon's loopback listener, its token
// check and its reverse proxy into the jail) against the same requests
// sent straight to the jail's port (a connection made in the jail's
// network namespace, as the channel's own are, jail.DialIn, without the
// proxy), side by side with the ratio, medians of several runs. The
// server in the jail is this program (-serve PORT), copied into the
// thread's workspace: a small Go HTTP server, so that the server's own
// cost does not hide the channel's.
//
// It needs root (the direct side enters the jail's network namespace)
// and a daemon on -socket. bench/ports.sh runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"warren/api"
	"warren/client"
	"warren/jail"
)

func main() {
	serve := flag.Int("serve", 0, "serve HTTP on 127.0.0.1:`PORT` (in the jail) instead")
	socket := flag.String("socket", "/var/lib/warren/warren.sock", "the daemon's socket")
	runs := flag.Int("runs", 5, "runs of each measure (the median is shown)")
	seconds := flag.Float64("seconds", 2, "length of each run")
	conns := flag.Int("conns", 4, "requests in flight at once")
	flag.Parse()
	if *serve != 0 {
		serveHTTP(*serve)
		return
	}
	if err := bench(context.Background(), *socket, *runs, time.Duration(*seconds*float64(time.Second)), *conns); err != nil {
		log.Fatalf("portbench: %v", err)
	}
}

// serveHTTP answers every request with a short body, until killed.
func serveHTTP(port int) {
	body := []byte("ok\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+strconv.Itoa(port), h))
}

const (
	tenant, thread = "bench", "ports"
	port           = 8080
)

func bench(ctx context.Context, socket string, runs int, d time.Duration, conns int) error {
	c := client.New(socket)
	defer c.CloseIdleConnections()
	if _, err := c.Bind(ctx, tenant, thread); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	mode := uint32(0o755)
	if _, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "portbench", Mode: &mode}, bytes.NewReader(self)); err != nil {
		return fmt.Errorf("copy the server into the workspace: %w", err)
	}
	job, err := c.Spawn(ctx, tenant, thread, api.SpawnRequest{Command: fmt.Sprintf("exec ./portbench -serve %d", port), Label: "portbench server"})
	if err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	defer c.StopJob(context.Background(), tenant, thread, job.ID, time.Second)
	ch, err := c.OpenPort(ctx, tenant, thread, port)
	if err != nil {
		return fmt.Errorf("open the channel: %w", err)
	}
	defer c.ClosePort(context.Background(), tenant, thread, port)
	ns, err := jobNetNS(job)
	if err != nil {
		return fmt.Errorf("the jail's network namespace: %w", err)
	}
	defer ns.Close()

	addr := "127.0.0.1:" + strconv.Itoa(port)
	channel := func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: conns, DisableCompression: true,
		}}
	}
	direct := func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: conns, DisableCompression: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return jail.DialIn(ctx, ns, "tcp", addr)
			},
		}}
	}
	// The server is up once a request through the channel is answered.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := get(ctx, channel(true), ch.URL+"/", ch.Headers); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the server in the jail did not answer in 30 s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	fmt.Printf("ports: requests per second to a small HTTP server in a jail, %d in flight, median of %d runs of %v\n", conns, runs, d)
	fmt.Printf("%-34s %12s %12s %8s\n", "", "direct", "channel", "ratio")
	for _, keepAlive := range []bool{true, false} {
		var dr, cr []float64
		dc, cc := direct(keepAlive), channel(keepAlive)
		for range runs {
			// Alternated, so that a drift of the machine falls on both.
			r, err := rate(ctx, dc, "http://"+addr+"/", nil, d, conns)
			if err != nil {
				return fmt.Errorf("direct: %w", err)
			}
			dr = append(dr, r)
			if r, err = rate(ctx, cc, ch.URL+"/", ch.Headers, d, conns); err != nil {
				return fmt.Errorf("channel: %w", err)
			}
			cr = append(cr, r)
		}
		dc.CloseIdleConnections()
		cc.CloseIdleConnections()
		name := "keep-alive"
		if !keepAlive {
			name = "a new connection per request"
		}
		dm, cm := median(dr), median(cr)
		fmt.Printf("%-34s %12.0f %12.0f %7.2fx\n", name, dm, cm, cm/dm)
	}
	return nil
}

// jobNetNS opens the network namespace of a job's process, found through
// its cgroup.
func jobNetNS(job api.JobInfo) (*os.File, error) {
	if job.Cgroup == "" {
		return nil, fmt.Errorf("job %s has no cgroup (a jail bounded by rlimits): its process cannot be found", job.ID)
	}
	f, err := os.Open(filepath.Join(job.Cgroup, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid := strings.TrimSpace(sc.Text()); pid != "" {
			return os.Open("/proc/" + pid + "/ns/net")
		}
	}
	return nil, fmt.Errorf("no process in %s", job.Cgroup)
}

// get sends one GET and reads its answer, which must be 200.
func get(ctx context.Context, hc *http.Client, url string, headers map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// rate sends GETs from conns goroutines for d and returns the answers
// per second.
func rate(ctx context.Context, hc *http.Client, url string, headers map[string]string, d time.Duration, conns int) (float64, error) {
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	end := start.Add(d)
	for range conns {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := get(ctx, hc, url, headers); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
