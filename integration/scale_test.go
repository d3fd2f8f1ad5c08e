package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// procStatus reads one number (kB for sizes) of /proc/<pid>/status.
func procStatus(t testing.TB, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			must(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestThousandThreads binds 1,000 threads in one daemon, on its default
// flags, as fast as one client can, and uses every one of them. An idle
// bound thread must cost the daemon at most one descriptor and 100 KiB,
// and no OS thread of its own (the daemon stays at most 200); binding
// must not slow down as threads pile up; and a restart must serve at
// once. With one FUSE server per thread (before shared connections) the
// daemon took 5 descriptors, 2 MiB and 2.6 OS threads per bound thread,
// and died of thread exhaustion near 3,900.
func TestThousandThreads(t *testing.T) {
	const n = 1000
	d := newDaemon(t)
	c := d.client()
	ctx := context.Background()
	pid := d.pid()
	bind := func(i int) time.Duration {
		start := time.Now()
		if _, err := c.Bind(ctx, "scale", "t"+strconv.Itoa(i)); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		return time.Since(start)
	}
	// A first thread, so that what every daemon has once (the shared
	// connection, the store's tables) is not counted per thread.
	bind(-1)
	fds0, _, _ := daemonFds(t, pid, d.data)
	rss0 := procStatus(t, pid, "VmRSS")
	times := make([]time.Duration, n)
	for i := range n {
		times[i] = bind(i)
	}
	fds, _, _ := daemonFds(t, pid, d.data)
	rss := procStatus(t, pid, "VmRSS")
	threads := procStatus(t, pid, "Threads")
	perFd := float64(fds-fds0) / n
	perKiB := float64(rss-rss0) / n
	t.Logf("%d threads bound: %.2f descriptors and %.1f KiB per thread, %d OS threads", n, perFd, perKiB, threads)
	if perFd > 1 {
		t.Errorf("descriptors per idle bound thread: got %.2f, want at most 1", perFd)
	}
	if perKiB > 100 {
		t.Errorf("memory per idle bound thread: got %.1f KiB, want at most 100", perKiB)
	}
	if threads > 200 {
		t.Errorf("the daemon's OS threads: got %d with %d threads bound, want at most 200", threads, n)
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	first, last := median(times[:100]), median(times[n-100:])
	t.Logf("bind median: %v for binds 1-100, %v for binds %d-%d", first, last, n-99, n)
	// Generous, for a noisy machine: bench/threads.sh measures the 2x
	// target at 10,000; this catches a bind that grows with the threads.
	if last > 3*first+3*time.Millisecond {
		t.Errorf("bind slowed down: median %v for the last 100, %v for the first 100", last, first)
	}
	// Every thread is used: a file written through the API to each, and
	// a command in some of them in turn.
	for i := range n {
		th := "t" + strconv.Itoa(i)
		if _, err := c.Files().Write(ctx, "scale", th, api.WriteFileRequest{Path: "hello.txt", Content: th}); err != nil {
			t.Fatalf("write in %s: %v", th, err)
		}
	}
	// Each mount path serves its own file, read through the kernel.
	threadList, err := c.Threads(ctx)
	must(t, err)
	mounted := 0
	for i, ti := range threadList {
		if !ti.Mounted {
			continue
		}
		mounted++
		if i%37 != 0 || ti.Thread == "t-1" {
			continue
		}
		got, err := os.ReadFile(filepath.Join(ti.MountPath, "hello.txt"))
		if err != nil || string(got) != ti.Thread {
			t.Errorf("%s/hello.txt through its mount: %q, %v", ti.Thread, got, err)
		}
	}
	if mounted != n+1 {
		t.Errorf("%d of %d threads mounted", mounted, n+1)
	}
	for i := 0; i < n; i += 50 {
		th := "t" + strconv.Itoa(i)
		code, out := d.execIn(th, "cat hello.txt", "--tenant", "scale")
		if code != 0 || out != th {
			t.Fatalf("exec in %s: exit %d, %q", th, code, out)
		}
	}
	// A restart serves at once.
	d.stop()
	start := time.Now()
	d.startServing()
	served := time.Since(start)
	if served > 10*time.Second {
		t.Errorf("the restart served after %v, want at most 10s", served)
	}
	th := "t" + strconv.Itoa(n-1)
	if code, out := d.execIn(th, "cat hello.txt", "--tenant", "scale"); code != 0 || out != th {
		t.Fatalf("exec in %s after the restart: exit %d, %q", th, code, out)
	}
	d.waitRestored()
	t.Logf("the restart served after %v; every thread was served again after %v", served.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
