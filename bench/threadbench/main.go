// Command threadbench binds many threads in one daemon as fast as one
// client can and reports what they cost it (bench/threads.sh, issue 29):
// bind medians and p99 at 10, 1,000 and N threads, the daemon's memory,
// descriptors and OS threads per bound thread, and then uses every thread
// (a file written to each, a command in every tenth up to 1,000).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/client"
)

func main() {
	socket := flag.String("socket", "", "the daemon's API socket")
	pid := flag.Int("pid", 0, "the daemon's pid")
	n := flag.Int("threads", 10000, "threads to bind")
	execs := flag.Int("execs", 1000, "commands to run, in as many threads")
	flag.Parse()
	if err := run(*socket, *pid, *n, *execs); err != nil {
		fmt.Fprintln(os.Stderr, "threadbench:", err)
		os.Exit(1)
	}
}

// gauges are the daemon's resident memory (KiB), descriptors and threads.
type gauges struct{ rssKiB, fds, threads int }

func read(pid int) (gauges, error) {
	var g gauges
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return g, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			g.rssKiB, _ = strconv.Atoi(f[1])
		case "Threads:":
			g.threads, _ = strconv.Atoi(f[1])
		}
	}
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return g, err
	}
	g.fds = len(es)
	return g, nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func run(socket string, pid, n, execs int) error {
	ctx := context.Background()
	c := client.New(socket)
	defer c.CloseIdleConnections()
	if _, err := c.Bind(ctx, "bench", "first"); err != nil {
		return fmt.Errorf("first bind: %w", err)
	}
	g0, err := read(pid)
	if err != nil {
		return err
	}
	times := make([]time.Duration, n)
	start := time.Now()
	for i := range n {
		t0 := time.Now()
		if _, err := c.Bind(ctx, "bench", "t"+strconv.Itoa(i)); err != nil {
			return fmt.Errorf("bind %d: %w", i, err)
		}
		times[i] = time.Since(t0)
	}
	took := time.Since(start)
	g, err := read(pid)
	if err != nil {
		return err
	}
	fmt.Printf("threads bound: %d in %v (%.0f/s)\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	fmt.Printf("%-22s %10s %10s\n", "binds", "median", "p99")
	for _, w := range [][2]int{{0, 10}, {0, min(100, n)}, {max(0, 900), min(1000, n)}, {max(0, n-100), n}} {
		if w[1] <= w[0] {
			continue
		}
		ds := times[w[0]:w[1]]
		fmt.Printf("%-22s %10v %10v\n", fmt.Sprintf("%d-%d", w[0]+1, w[1]), quantile(ds, 0.5).Round(time.Microsecond), quantile(ds, 0.99).Round(time.Microsecond))
	}
	ratio := float64(quantile(times[max(0, n-100):], 0.5)) / float64(quantile(times[:min(100, n)], 0.5))
	fmt.Printf("last 100 / first 100 (medians): %.2fx (target at most 2x)\n", ratio)
	fmt.Printf("daemon: %d MiB, %d descriptors, %d OS threads with %d threads bound\n", g.rssKiB>>10, g.fds, g.threads, n+1)
	fmt.Printf("per bound thread: %.1f KiB (target 100), %.2f descriptors (target 1); one FUSE server per thread measured 2048 KiB and 5 descriptors\n",
		float64(g.rssKiB-g0.rssKiB)/float64(n), float64(g.fds-g0.fds)/float64(n))
	for i := range n {
		th := "t" + strconv.Itoa(i)
		if _, err := c.Files().Write(ctx, "bench", th, api.WriteFileRequest{Path: "f", Content: th}); err != nil {
			return fmt.Errorf("write in %s: %w", th, err)
		}
	}
	ex := make([]time.Duration, 0, execs)
	step := max(1, n/max(1, execs))
	for i := 0; i < n && len(ex) < execs; i += step {
		t0 := time.Now()
		code, err := c.Exec(ctx, "bench", "t"+strconv.Itoa(i), api.ExecRequest{Command: "true"}, io.Discard, io.Discard)
		if err != nil || code != 0 {
			return fmt.Errorf("exec in t%d: %d, %v", i, code, err)
		}
		ex = append(ex, time.Since(t0))
	}
	g, _ = read(pid)
	fmt.Printf("every thread written to; %d commands, first command of a thread median %v; daemon then %d MiB, %d descriptors, %d OS threads\n",
		len(ex), quantile(ex, 0.5).Round(time.Microsecond), g.rssKiB>>10, g.fds, g.threads)
	return nil
}
