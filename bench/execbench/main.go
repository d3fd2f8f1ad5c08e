// Command execbench measures what running a command costs through warren,
// side by side in one run:
//
//   - plain:  /bin/true with a fork and exec from Go (the floor), and
//     bash -c true the same way (what the API runs for "true");
//   - warren: `true` through the API in a thread's warm jail (POST .../exec,
//     bash -c, the answer's frames read to the end);
//   - warren CLI: `warren exec -- true` end to end, the CLI binary forked
//     and executed each time, against the same warm jail; and `warren help`,
//     the CLI's start alone;
//   - bwrap:  one bubblewrap call running /bin/true in new namespaces;
//   - first:  the first command of a new thread: bind, mount, jail, exec;
//   - jobs:   head -c 1G /dev/zero as a background job, its output kept by
//     the gateway, against the same job with its output sent to
//     /dev/null; and the gateway's CPU time per MiB of output;
//   - threads: 1,000 threads bound on one daemon (the design's target):
//     how long binding them takes, the daemon's memory and descriptors,
//     and a file read through the API with 1,000 threads bound against
//     the same read with one.
//
// It prints medians and the ratios the targets speak of: warm warren at
// most 1.5× plain and faster than bwrap, the CLI's `exec -- true` faster
// than bwrap too, and a first command in at most 100 ms. bench/exec.sh starts the daemon and runs this.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/client"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("execbench: ")
	socket := flag.String("socket", "", "the daemon's socket (required)")
	runs := flag.Int("runs", 200, "timed runs of each warm measure")
	firsts := flag.Int("firsts", 20, "new threads for the first-command measure")
	bwrap := flag.String("bwrap", "bwrap", "the bubblewrap binary; empty to skip")
	warrenCLI := flag.String("warren", "", "the warren CLI binary, to time `warren exec -- true` end to end; empty to skip")
	daemonPid := flag.Int("daemon-pid", 0, "the daemon's pid, to measure its CPU time per MB of job output")
	jobBytes := flag.Int64("job-bytes", 1<<30, "output of the job throughput measure")
	jobRuns := flag.Int("job-runs", 5, "timed runs of each job measure")
	threads := flag.Int("threads", 1000, "threads to bind for the many-threads measure; 0 to skip")
	flag.Parse()
	if *socket == "" {
		log.Fatal("-socket is required")
	}
	ctx := context.Background()
	c := client.New(*socket)
	defer c.CloseIdleConnections()

	plain := func() error { return exec.Command("/bin/true").Run() }
	// What the API runs for "true": bash -c true, without a jail.
	plainBash := func() error { return exec.Command("/bin/bash", "-c", "true").Run() }
	warm := func() error {
		code, err := c.Exec(ctx, "bench", "warm", api.ExecRequest{Command: "true"}, nil, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d", code)
		}
		return err
	}
	bw := func() error {
		return exec.Command(*bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
			"--unshare-all", "--die-with-parent", "/bin/true").Run()
	}
	// The jail of the warm thread is made by its first command.
	if err := warm(); err != nil {
		log.Fatalf("warm-up: %v", err)
	}
	type measure struct {
		name string
		f    func() error
		d    []time.Duration
	}
	ms := []*measure{{name: "plain fork+exec", f: plain}, {name: "plain bash -c true", f: plainBash}, {name: "warren, warm jail", f: warm}}
	if *warrenCLI != "" {
		// The whole CLI call, as an agent's tool runs it: fork, exec,
		// the CLI's start, one API call, the CLI's exit.
		cliExec := func() error {
			return exec.Command(*warrenCLI, "exec", "--socket", *socket, "--tenant", "bench", "--thread", "warm", "--", "true").Run()
		}
		// The CLI's start alone (help prints its usage and exits).
		cliHelp := func() error {
			return exec.Command(*warrenCLI, "help").Run()
		}
		if err := cliExec(); err != nil {
			log.Fatalf("%s exec -- true: %v", *warrenCLI, err)
		}
		ms = append(ms, &measure{name: "warren CLI exec", f: cliExec}, &measure{name: "warren CLI help", f: cliHelp})
	}
	if *bwrap != "" {
		if _, err := exec.LookPath(*bwrap); err != nil {
			log.Printf("bwrap: not measured (%v)", err)
		} else if err := bw(); err != nil {
			log.Printf("bwrap: not measured (it fails here: %v)", err)
		} else {
			ms = append(ms, &measure{name: "bwrap", f: bw})
		}
	}
	// Turns within each round, so drift hits every measure alike.
	for range *runs {
		for _, m := range ms {
			start := time.Now()
			if err := m.f(); err != nil {
				log.Fatalf("%s: %v", m.name, err)
			}
			m.d = append(m.d, time.Since(start))
		}
	}
	var first []time.Duration
	for i := range *firsts {
		thread := fmt.Sprintf("first-%d-%d", os.Getpid(), i)
		start := time.Now()
		code, err := c.Exec(ctx, "bench", thread, api.ExecRequest{Command: "true"}, nil, nil)
		if err != nil || code != 0 {
			log.Fatalf("first command of %s: exit %d, %v", thread, code, err)
		}
		first = append(first, time.Since(start))
		if err := c.DeleteThread(ctx, "bench", thread); err != nil {
			log.Fatalf("delete %s: %v", thread, err)
		}
	}

	med := map[string]time.Duration{}
	fmt.Printf("%-22s %12s %12s %12s   (%d runs)\n", "measure", "median", "p10", "p90", *runs)
	for _, m := range ms {
		p := percentiles(m.d)
		med[m.name] = p[1]
		fmt.Printf("%-22s %12s %12s %12s\n", m.name, round(p[1]), round(p[0]), round(p[2]))
	}
	pf := percentiles(first)
	fmt.Printf("%-22s %12s %12s %12s   (%d new threads)\n", "first command", round(pf[1]), round(pf[0]), round(pf[2]), *firsts)
	fmt.Println()
	ratio := float64(med["warren, warm jail"]) / float64(med["plain fork+exec"])
	fmt.Printf("warm warren / plain fork+exec: %.2fx (target <= 1.50x): %s\n", ratio, verdict(ratio <= 1.5))
	fmt.Printf("warm warren / plain bash -c:   %.2fx (the same command without the jail and the API)\n",
		float64(med["warren, warm jail"])/float64(med["plain bash -c true"]))
	if b, ok := med["bwrap"]; ok {
		r := float64(med["warren, warm jail"]) / float64(b)
		fmt.Printf("warm warren / bwrap:           %.2fx (target < 1.00x): %s\n", r, verdict(r < 1))
	}
	if ce, ok := med["warren CLI exec"]; ok {
		fmt.Printf("CLI exec / plain fork+exec:    %.2fx (warren exec -- true end to end)\n", float64(ce)/float64(med["plain fork+exec"]))
		if b, ok := med["bwrap"]; ok {
			r := float64(ce) / float64(b)
			fmt.Printf("CLI exec / bwrap:              %.2fx (target < 1.00x): %s\n", r, verdict(r < 1))
		}
		fmt.Printf("CLI help / plain fork+exec:    %.2fx (the CLI's start)\n", float64(med["warren CLI help"])/float64(med["plain fork+exec"]))
	}
	fmt.Printf("first command median:          %s (target <= 100ms): %s\n", round(pf[1]), verdict(pf[1] <= 100*time.Millisecond))

	if *jobRuns > 0 {
		fmt.Println()
		measureJobs(ctx, c, *jobBytes, *jobRuns, *daemonPid)
	}
	if *threads > 0 {
		fmt.Println()
		measureThreads(ctx, c, *threads, *runs, *daemonPid)
	}
}

// measureThreads binds n threads, writing a file in each, and compares a
// file read with one thread bound to the same read with n bound.
func measureThreads(ctx context.Context, c *client.Client, n, runs, daemonPid int) {
	read := func() time.Duration {
		start := time.Now()
		if _, err := c.Files().Read(ctx, "many", "t-0", api.ReadFileRequest{Path: "f"}); err != nil {
			log.Fatalf("read: %v", err)
		}
		return time.Since(start)
	}
	bind := func(i int) time.Duration {
		start := time.Now()
		thread := fmt.Sprintf("t-%d", i)
		if _, err := c.Files().Write(ctx, "many", thread, api.WriteFileRequest{Path: "f", Content: thread + "\n"}); err != nil {
			log.Fatalf("bind and write %s: %v", thread, err)
		}
		return time.Since(start)
	}
	bind(0)
	var one []time.Duration
	for range runs {
		one = append(one, read())
	}
	rss0, fds0 := procUsage(daemonPid)
	var binds []time.Duration
	start := time.Now()
	for i := 1; i < n; i++ {
		binds = append(binds, bind(i))
	}
	all := time.Since(start)
	var many []time.Duration
	for range runs {
		many = append(many, read())
	}
	rss, fds := procUsage(daemonPid)
	threads, err := c.Threads(ctx)
	if err != nil {
		log.Fatalf("list: %v", err)
	}
	mounted := 0
	for _, t := range threads {
		if t.Tenant == "many" && t.Mounted {
			mounted++
		}
	}
	p1, pn, pb := percentiles(one), percentiles(many), percentiles(binds)
	fmt.Printf("%-30s %12s %12s %12s   (%d runs)\n", "threads", "median", "p10", "p90", runs)
	fmt.Printf("%-30s %12s %12s %12s\n", "file read, 1 thread bound", round(p1[1]), round(p1[0]), round(p1[2]))
	fmt.Printf("%-30s %12s %12s %12s\n", fmt.Sprintf("file read, %d threads bound", n), round(pn[1]), round(pn[0]), round(pn[2]))
	fmt.Printf("%-30s %12s %12s %12s\n", "bind + first write", round(pb[1]), round(pb[0]), round(pb[2]))
	fmt.Printf("\n%d threads bound, %d of them mounted, in %s\n", n, mounted, all.Round(time.Millisecond))
	fmt.Printf("read with %d bound / with 1:  %.2fx (target: %d bound threads on one machine, calls unharmed)\n", n, float64(pn[1])/float64(p1[1]), n)
	if daemonPid > 0 {
		fmt.Printf("daemon memory: %d MiB with 1 thread, %d MiB with %d (%.0f KiB per thread); descriptors: %d, %d\n",
			rss0>>20, rss>>20, n, float64(rss-rss0)/float64(n-1)/1024, fds0, fds)
	}
	for i := range n {
		if err := c.DeleteThread(ctx, "many", fmt.Sprintf("t-%d", i)); err != nil {
			log.Fatalf("delete: %v", err)
		}
	}
}

// procUsage returns the resident memory (bytes) and open descriptors of
// process pid; zeros without a pid.
func procUsage(pid int) (rss int64, fds int) {
	if pid <= 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		log.Fatalf("daemon status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rss, len(ents)
}

// measureJobs times a job that writes n bytes, kept by the gateway, and
// the same job writing them to /dev/null, taking turns.
func measureJobs(ctx context.Context, c *client.Client, n int64, runs, daemonPid int) {
	cmd := fmt.Sprintf("head -c %d /dev/zero", n)
	var kept, null []time.Duration
	var cpu []float64 // daemon CPU seconds per kept job
	for range runs {
		before := cpuSeconds(daemonPid)
		d, out := runJob(ctx, c, cmd)
		if out != n {
			log.Fatalf("job kept %d bytes of output, want %d", out, n)
		}
		cpu = append(cpu, cpuSeconds(daemonPid)-before)
		kept = append(kept, d)
		d, _ = runJob(ctx, c, cmd+" >/dev/null")
		null = append(null, d)
	}
	pk, pn := percentiles(kept), percentiles(null)
	mb := float64(n) / (1 << 20)
	fmt.Printf("%-30s %12s %12s %12s   (%d runs, %.0f MiB)\n", "job output", "median", "p10", "p90", runs, mb)
	fmt.Printf("%-30s %12s %12s %12s\n", "job, output to /dev/null", round(pn[1]), round(pn[0]), round(pn[2]))
	fmt.Printf("%-30s %12s %12s %12s\n", "job, output kept by warren", round(pk[1]), round(pk[0]), round(pk[2]))
	ratio := float64(pn[1]) / float64(pk[1])
	fmt.Printf("\njob throughput kept / /dev/null: %.2fx (target >= 0.80x): %s\n", ratio, verdict(ratio >= 0.8))
	fmt.Printf("job output kept:                 %.0f MiB/s\n", mb/pk[1].Seconds())
	if daemonPid > 0 {
		sort.Float64s(cpu)
		fmt.Printf("gateway CPU per MiB of output:   %.3f ms (median of %d)\n", cpu[len(cpu)/2]/mb*1000, len(cpu))
	}
}

// runJob runs one job to its end and returns how long it took and how
// much output the gateway kept count of.
func runJob(ctx context.Context, c *client.Client, cmd string) (time.Duration, int64) {
	start := time.Now()
	job, err := c.Spawn(ctx, "bench", "jobs", api.SpawnRequest{Command: cmd})
	if err != nil {
		log.Fatalf("spawn: %v", err)
	}
	for {
		info, err := c.Job(ctx, "bench", "jobs", job.ID)
		if err != nil {
			log.Fatalf("job %s: %v", job.ID, err)
		}
		if info.Ended {
			if info.ExitCode == nil || *info.ExitCode != 0 {
				log.Fatalf("job %s: %+v", job.ID, info)
			}
			return time.Since(start), info.OutputBytes
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cpuSeconds is the user and system time of process pid so far; 0 without
// a pid.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatalf("daemon cpu: %v", err)
	}
	// Fields after the command name (which ends with the last ')'):
	// utime and stime are the 12th and 13th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // clock ticks of USER_HZ
}

// percentiles returns the 10th, 50th and 90th percentiles.
func percentiles(d []time.Duration) [3]time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	return [3]time.Duration{at(0.1), at(0.5), at(0.9)}
}

func round(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "MISSED"
}
