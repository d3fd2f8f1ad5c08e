// Command execbench measures what running a command costs through warren,
// side by side in one run:
//
//   - plain:  /bin/true with a fork and exec from Go (the floor), and
//     bash -c true the same way (what the API runs for "true");
//   - warren: `true` through the API in a thread's warm jail (POST .../exec,
//     bash -c, the answer's frames read to the end);
//   - bwrap:  one bubblewrap call running /bin/true in new namespaces;
//   - first:  the first command of a new thread: bind, mount, jail, exec.
//
// It prints medians and the ratios the targets speak of: warm warren at
// most 1.5× plain and faster than bwrap, and a first command in at most
// 100 ms. bench/exec.sh starts the daemon and runs this.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sort"
	"time"

	"warren/gateway"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("execbench: ")
	socket := flag.String("socket", "", "the daemon's socket (required)")
	runs := flag.Int("runs", 200, "timed runs of each warm measure")
	firsts := flag.Int("firsts", 20, "new threads for the first-command measure")
	bwrap := flag.String("bwrap", "bwrap", "the bubblewrap binary; empty to skip")
	flag.Parse()
	if *socket == "" {
		log.Fatal("-socket is required")
	}
	ctx := context.Background()
	c := gateway.NewClient(*socket)
	defer c.CloseIdleConnections()

	plain := func() error { return exec.Command("/bin/true").Run() }
	// What the API runs for "true": bash -c true, without a jail.
	plainBash := func() error { return exec.Command("/bin/bash", "-c", "true").Run() }
	warm := func() error {
		code, err := c.Exec(ctx, "bench", "warm", gateway.ExecRequest{Command: "true"}, nil, nil)
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
		code, err := c.Exec(ctx, "bench", thread, gateway.ExecRequest{Command: "true"}, nil, nil)
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
	fmt.Printf("first command median:          %s (target <= 100ms): %s\n", round(pf[1]), verdict(pf[1] <= 100*time.Millisecond))
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
