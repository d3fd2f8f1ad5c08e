// Command netbench measures the egress network (issue 32): a jail in
// network egress against the host itself, reaching the same "outside",
// side by side with the ratio, medians of several runs:
//
//   - stream:  one TCP stream of -bytes to a sink in the outside, from
//     connect to the sink's close after the last byte (target: the jail at
//     least 0.9x the host's throughput);
//   - connect: -connects TCP connects to a listener in the outside, the
//     median of each run (target: the jail at most 1.2x the host's time);
//   - first:   bind of a new thread and its first `true`, network egress
//     against network none, -threads new threads each, taking turns (target:
//     egress adds under 20 ms).
//
// The outside is internal/netenv's world: a network namespace this program
// makes, linked to the host by a veth on 198.51.100.0/24 (TEST-NET-2; the
// tests' worlds are on TEST-NET-3, so the two never meet), which the jail
// reaches through the daemon's NAT as it would the internet. No traffic
// goes anywhere else. The world goes when the program ends, on a signal
// too; if it is killed, the namespace goes with its descriptor and the
// link with the namespace.
//
// Every side runs the same client: this program (-stream, -connect),
// copied into the thread's workspace and run there through the daemon,
// run on the host as a child, and run as a child in the jail's network
// namespace (nsenter: the jail's network path without the jail's process,
// to tell the two apart); each times itself, so no figure holds a process
// start or the API.
//
// It needs root (a namespace, a link) and a daemon on -socket that allows
// network egress. bench/net.sh runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/netenv"
	"warren/meta"
)

const tenant = "bench"

// The sides of the stream and connect measures: the host; a host process
// in the jail's network namespace (nsenter), the network path without the
// jail's process; the jail, through the daemon.
const (
	hostSide = iota
	nsSide
	jailSide
	sides
)

var sideNames = [sides]string{"on the host", "in the jail's namespace", "in the jail"}

func main() {
	stream := flag.String("stream", "", "client: send -bytes to the sink at `ADDR` and print bytes per second")
	connect := flag.String("connect", "", "client: connect -connects times to `ADDR` and print the median in nanoseconds")
	socket := flag.String("socket", "/var/lib/warren/warren.sock", "the daemon's socket")
	runs := flag.Int("runs", 5, "runs of the stream and connect measures (the median is shown)")
	size := flag.Int64("bytes", 512<<20, "bytes of one stream")
	connects := flag.Int("connects", 200, "connects in one run")
	threads := flag.Int("threads", 20, "new threads of each network for the first-command measure")
	flag.Parse()
	switch {
	case *stream != "":
		bps, err := sendStream(*stream, *size)
		if err != nil {
			log.Fatalf("netbench -stream: %v", err)
		}
		fmt.Println(int64(bps))
	case *connect != "":
		d, err := connectMedian(*connect, *connects)
		if err != nil {
			log.Fatalf("netbench -connect: %v", err)
		}
		fmt.Println(d.Nanoseconds())
	default:
		if err := bench(*socket, *runs, *size, *connects, *threads); err != nil {
			log.Fatalf("netbench: %v", err)
		}
	}
}

// sendStream connects to a sink, sends n bytes, half-closes and waits for
// the sink's close, which comes once it read them all; it returns the
// bytes per second over the whole of it, connect included.
func sendStream(addr string, n int64) (float64, error) {
	buf := make([]byte, 256<<10)
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	for left := n; left > 0; {
		k := int64(len(buf))
		if left < k {
			k = left
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return 0, err
		}
		left -= k
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	var got [8]byte
	if k, err := io.ReadFull(c, got[:]); err != nil {
		return 0, fmt.Errorf("the sink's count: %w", err)
	} else if r, _ := strconv.ParseInt(strings.TrimSpace(string(got[:k])), 16, 64); r != n&0xffffffff {
		return 0, fmt.Errorf("the sink read %#x bytes, want %#x", r, n&0xffffffff)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// connectMedian connects n times to addr, closing each connection at
// once, and returns the median time of a connect.
func connectMedian(addr string, n int) (time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
		c.Close()
	}
	return median(d), nil
}

// jobNetNS returns the path of the network namespace of a job's process,
// found through its cgroup.
func jobNetNS(job api.JobInfo) (string, error) {
	if job.Cgroup == "" {
		return "", fmt.Errorf("job %s has no cgroup (a jail bounded by rlimits): its process cannot be found", job.ID)
	}
	procs, err := os.ReadFile(filepath.Join(job.Cgroup, "cgroup.procs"))
	if err != nil {
		return "", err
	}
	pid, _, _ := strings.Cut(strings.TrimSpace(string(procs)), "\n")
	if pid == "" {
		return "", fmt.Errorf("no process in %s", job.Cgroup)
	}
	return "/proc/" + pid + "/ns/net", nil
}

// outside is the world with its two servers: a sink that reads a stream
// to its end and answers with the count (8 hex digits, its low 32 bits),
// and a listener that closes what it accepts.
type outside struct {
	w            *netenv.World
	sink, closer net.Listener
	once         sync.Once
}

func openOutside() (*outside, error) {
	w, err := netenv.OpenWorld(netenv.TestNet2)
	if err != nil {
		return nil, err
	}
	o := &outside{w: w}
	listen := func() (l net.Listener, err error) {
		err = w.Do(func() (err error) { l, err = net.Listen("tcp", w.Addr.String()+":0"); return })
		return
	}
	if o.sink, err = listen(); err == nil {
		o.closer, err = listen()
	}
	if err != nil {
		o.close()
		return nil, fmt.Errorf("a listener in the world: %w", err)
	}
	go accept(o.sink, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "%08x", n&0xffffffff)
	})
	go accept(o.closer, func(net.Conn) {})
	return o, nil
}

func accept(l net.Listener, serve func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			serve(c)
		}()
	}
}

// close takes the world away, once: its listeners, its link, its
// namespace.
func (o *outside) close() {
	o.once.Do(func() {
		for _, l := range []net.Listener{o.sink, o.closer} {
			if l != nil {
				l.Close()
			}
		}
		if err := o.w.Close(); err != nil {
			log.Printf("netbench: taking the world away: %v", err)
		}
	})
}

func bench(socket string, runs int, size int64, connects, threads int) error {
	out, err := openOutside()
	if err != nil {
		return err
	}
	defer out.close()
	// A signal takes the world away before the program goes.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		out.close()
		log.Fatalf("netbench: %v", s)
	}()

	ctx := context.Background()
	c := client.New(socket)
	defer c.CloseIdleConnections()
	thread := fmt.Sprintf("net-%d", os.Getpid())
	if _, err := c.BindWith(ctx, tenant, thread, meta.Settings{Network: "egress"}); err != nil {
		return fmt.Errorf("bind an egress thread: %w", err)
	}
	defer c.DeleteThread(context.Background(), tenant, thread)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	mode := uint32(0o755)
	if _, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "netbench", Mode: &mode}, bytes.NewReader(self)); err != nil {
		return fmt.Errorf("copy the client into the workspace: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// A job holds the jail up; its network namespace is the jail's.
	job, err := c.Spawn(ctx, tenant, thread, api.SpawnRequest{Command: "exec sleep 86400", Label: "netbench: the jail's namespace"})
	if err != nil {
		return fmt.Errorf("a job in the jail: %w", err)
	}
	defer c.StopJob(context.Background(), tenant, thread, job.ID, time.Second)
	nsPath, err := jobNetNS(job)
	if err != nil {
		return fmt.Errorf("the jail's network namespace: %w", err)
	}
	// run runs the client with args on one side and returns the number
	// it prints.
	run := func(side int, args ...string) (float64, error) {
		var stdout, stderr bytes.Buffer
		switch side {
		case jailSide:
			code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "./netbench " + strings.Join(args, " ")}, &stdout, &stderr)
			if err == nil && code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
			if err != nil {
				return 0, fmt.Errorf("in the jail: %w: %s", err, strings.TrimSpace(stderr.String()))
			}
		default:
			cmd := exec.Command(exe, args...)
			if side == nsSide {
				cmd = exec.Command("nsenter", append([]string{"--net=" + nsPath, exe}, args...)...)
			}
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			// It goes with the benchmark: a client left sending to a world
			// taken away would block for good.
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Run(); err != nil {
				return 0, fmt.Errorf("%s: %w: %s", sideNames[side], err, strings.TrimSpace(stderr.String()))
			}
		}
		return strconv.ParseFloat(strings.TrimSpace(stdout.String()), 64)
	}
	sinkAddr, closerAddr := out.sink.Addr().String(), out.closer.Addr().String()
	// One untimed run each, so that every side starts warm (page cache,
	// the first entries of the kernel's tables made).
	for side := range sides {
		if _, err := run(side, "-stream", sinkAddr, "-bytes", strconv.FormatInt(min(size, 64<<20), 10)); err != nil {
			return fmt.Errorf("warm-up stream: %w", err)
		}
	}

	fmt.Printf("egress network: a jail in network egress against the host, to a namespace of the bench's linked by a veth (%s); median of %d runs\n", out.w.Addr, runs)
	fmt.Printf("%-36s %10s %12s %10s %8s %8s\n", "", "host", "jail's netns", "jail", "ratio", "netns")
	// measure runs the client with args on every side, runs times, and
	// returns the medians.
	// Every sample is listed at the end, so that a noisy run shows itself.
	var samples strings.Builder
	measure := func(label string, show func(float64) string, args ...string) (med [sides]float64, err error) {
		var v [sides][]float64
		for i := range runs {
			// Taking turns, the first side rotating, so that a drift of
			// the machine falls on all.
			for k := range sides {
				side := (k + i) % sides
				x, err := run(side, args...)
				if err != nil {
					return med, err
				}
				v[side] = append(v[side], x)
			}
		}
		for side := range sides {
			med[side] = median(v[side])
			fmt.Fprintf(&samples, "%s, %s:", label, sideNames[side])
			for _, x := range v[side] {
				fmt.Fprintf(&samples, " %s", show(x))
			}
			samples.WriteString("\n")
		}
		return med, nil
	}
	mibs := func(bps float64) string { return fmt.Sprintf("%.0f", bps/(1<<20)) }
	dur := func(ns float64) string { return round(time.Duration(ns)).String() }
	st, err := measure("stream MiB/s", mibs, "-stream", sinkAddr, "-bytes", strconv.FormatInt(size, 10))
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	streamRatio := st[jailSide] / st[hostSide]
	fmt.Printf("%-36s %10s %12s %10s %7.2fx %7.2fx\n", fmt.Sprintf("one TCP stream of %d MiB, MiB/s", size>>20),
		mibs(st[hostSide]), mibs(st[nsSide]), mibs(st[jailSide]), streamRatio, st[nsSide]/st[hostSide])
	ct, err := measure("connect", dur, "-connect", closerAddr, "-connects", strconv.Itoa(connects))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	connectRatio := ct[jailSide] / ct[hostSide]
	fmt.Printf("%-36s %10s %12s %10s %7.2fx %7.2fx\n", fmt.Sprintf("TCP connect (median of %d)", connects),
		dur(ct[hostSide]), dur(ct[nsSide]), dur(ct[jailSide]), connectRatio, ct[nsSide]/ct[hostSide])

	none, egress, err := firsts(ctx, c, threads, &samples)
	if err != nil {
		return fmt.Errorf("first command: %w", err)
	}
	fmt.Printf("\n%-40s %12s %12s %8s\n", fmt.Sprintf("new thread: bind + first true (%d each)", threads), "none", "egress", "added")
	fmt.Printf("%-40s %12s %12s %12s\n", "median", round(none), round(egress), round(egress-none))

	fmt.Printf("\nstream, jail over host:    %.2fx (target >= 0.9x): %s\n", streamRatio, verdict(streamRatio >= 0.9))
	fmt.Printf("connect, jail over host:   %.2fx (target <= 1.2x): %s\n", connectRatio, verdict(connectRatio <= 1.2))
	fmt.Printf("egress set-up, first true: %s over none (target < 20ms): %s\n", round(egress-none), verdict(egress-none < 20*time.Millisecond))
	fmt.Printf("\nsamples\n%s", samples.String())
	return nil
}

// firsts times the bind of a new thread and its first `true`, with
// network none and with network egress, n new threads each, taking turns;
// it returns the medians. Each thread is deleted after, untimed.
func firsts(ctx context.Context, c *client.Client, n int, samples io.Writer) (none, egress time.Duration, err error) {
	var d [2][]time.Duration
	networks := [2]string{"none", "egress"}
	for i := range n {
		for k := range 2 {
			k := (k + i) % 2
			thread := fmt.Sprintf("first-%d-%s-%d", os.Getpid(), networks[k], i)
			start := time.Now()
			if _, err := c.BindWith(ctx, tenant, thread, meta.Settings{Network: networks[k]}); err != nil {
				return 0, 0, fmt.Errorf("bind %s: %w", thread, err)
			}
			code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "true"}, nil, nil)
			if err == nil && code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("true in %s: %w", thread, err)
			}
			d[k] = append(d[k], time.Since(start))
			if err := c.DeleteThread(ctx, tenant, thread); err != nil {
				return 0, 0, fmt.Errorf("delete %s: %w", thread, err)
			}
		}
	}
	for k, name := range networks {
		fmt.Fprintf(samples, "first true, network %s:", name)
		for _, x := range d[k] {
			fmt.Fprintf(samples, " %s", round(x))
		}
		fmt.Fprintln(samples)
	}
	return median(d[0]), median(d[1]), nil
}

func median[T time.Duration | float64](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(d time.Duration) time.Duration {
	if d >= time.Millisecond || d <= -time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}
