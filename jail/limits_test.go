package jail

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
)

// TestCPULimitFiles: the quota a CPU bound writes on each hierarchy
// (this host has one of them; the other is checked here).
func TestCPULimitFiles(t *testing.T) {
	for _, c := range []struct {
		kind   string
		millis int
		want   string
	}{
		{"v2", 200, "cpu.max=20000 100000"},
		{"v2", 2500, "cpu.max=250000 100000"},
		{"v2", MinCPUMillis, "cpu.max=1000 100000"}, // the kernel's least quota, 1 ms
		{"v1", 200, "cpu.cfs_period_us=100000 cpu.cfs_quota_us=20000"},
		{"v1", 1000, "cpu.cfs_period_us=100000 cpu.cfs_quota_us=100000"},
	} {
		var got []string
		for _, f := range cpuLimitFiles(c.kind, c.millis) {
			got = append(got, f[0]+"="+f[1])
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%s, %d thousandths: %q, want %q", c.kind, c.millis, g, c.want)
		}
	}
}

// TestJailCPULimit: a jail bounded to 0.05 CPU gets no more than that of
// a CPU-bound loop, while one without a bound, spinning at the same time,
// gets several times more. The bound is small and the second bar relative
// so that the test holds on a busy 2-core machine: a loop under its bound
// can only get less than it, and the unbounded one gets at least its fair
// share of the machine, which stays above twice 0.05 CPU up to a load of
// about 20.
func TestJailCPULimit(t *testing.T) {
	testenv.RequireRoot(t)
	const (
		spin  = 2 * time.Second
		bound = 50 // thousandths of a CPU
	)
	limited, ws := startJailWith(t, Config{CPUMillis: bound})
	if !strings.HasPrefix(limited.Limits, "cgroup") {
		t.Fatalf("a jail with a CPU bound: %s", limited.Limits)
	}
	t.Log(limited.Limits)
	free, freeWs := startJail(t)
	bins := []string{installHelper(t, ws), installHelper(t, freeWs)}
	var used [2]float64
	var wg sync.WaitGroup
	for i, j := range []*Jail{limited, free} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out := runHelper(t, j, bins[i], "spin", strconv.FormatFloat(spin.Seconds(), 'f', -1, 64))
			if code != 0 {
				t.Errorf("spin: exit %d: %s", code, out)
				return
			}
			cpu, err := strconv.ParseFloat(out, 64)
			if err != nil {
				t.Errorf("spin: %q", out)
			}
			used[i] = cpu / spin.Seconds()
		}()
	}
	wg.Wait()
	t.Logf("share of a CPU over %v: bounded to %.2f: %.3f; unbounded: %.3f", spin, bound/1000.0, used[0], used[1])
	if used[0] > 2*bound/1000.0 {
		t.Errorf("a loop in a jail bounded to %.2f CPU got %.3f of a CPU", bound/1000.0, used[0])
	}
	if used[1] < 2*used[0] {
		t.Errorf("a loop in a jail without a bound got %.3f of a CPU, the bounded one %.3f: the measure shows nothing", used[1], used[0])
	}
}

// TestJailCPUBoundRefused: a CPU bound below the least, or one that only
// rlimits would have to give (they cannot), is refused at the start
// rather than run unbounded.
func TestJailCPUBoundRefused(t *testing.T) {
	testenv.RequireRoot(t)
	for _, cfg := range []Config{
		{CPUMillis: MinCPUMillis - 1},
		{CPUMillis: -1},
		{CPUMillis: 500, Rlimits: true},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cfg.Workspace = t.TempDir()
		j, err := Start(ctx, based(cfg))
		cancel()
		if err == nil {
			j.Close()
			t.Errorf("a jail with %s started: %s", fmt.Sprintf("CPUMillis %d, Rlimits %v", cfg.CPUMillis, cfg.Rlimits), j.Limits)
		} else {
			t.Logf("CPUMillis %d, Rlimits %v: %v", cfg.CPUMillis, cfg.Rlimits, err)
		}
	}
}

// TestRemoveStaleCgroups: the cgroups of a jail whose gateway was killed
// with SIGKILL (memory, pids and cpu on v1; one folder on v2) are all
// removed by RemoveStaleCgroups, and a live jail's are kept.
func TestRemoveStaleCgroups(t *testing.T) {
	live, _ := startJailWith(t, Config{CPUMillis: 100})
	if !strings.HasPrefix(live.Limits, "cgroup") {
		testenv.CannotRun(t, "no cgroup for limits: %s", live.Limits)
	}
	// A gateway of its own, in a process this test kills.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	gw := exec.Command(self)
	gw.Args = []string{self, t.TempDir()}
	gw.Env = append(os.Environ(), helperVar+"=hold-jail")
	stdout, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			gw.Process.Kill()
			gw.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, convErr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || convErr != nil {
		t.Fatalf("the held jail: %q, %v", line, err)
	}
	dirs := func(pid int) []string {
		var ds []string
		for _, h := range []string{"", "memory", "pids", "cpu", "cpuacct"} {
			d := filepath.Join(cgroupRoot, h, "warren", "jail-"+strconv.Itoa(pid))
			if isDir(d) {
				ds = append(ds, d)
			}
		}
		return ds
	}
	stale := dirs(pid)
	if len(stale) == 0 {
		t.Fatalf("the held jail %d has no cgroup", pid)
	}
	t.Logf("the held jail's cgroups: %v", stale)
	gw.Process.Signal(syscall.SIGKILL)
	gw.Wait()
	killed = true
	// Its init dies with it (doc.go). Wait until it is gone and its
	// cgroups are empty: the leader of a process shows as a zombie while
	// its other threads are still leaving, and RemoveStaleCgroups keeps a
	// cgroup that holds any process.
	empty := func() bool {
		for _, d := range stale {
			if b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(strings.TrimSpace(string(b))) > 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for processRuns(pid) || !empty() {
		if time.Now().After(deadline) {
			t.Fatalf("the init %d of a jail whose gateway was killed still runs or is in its cgroups", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := RemoveStaleCgroups(); err != nil {
		t.Errorf("RemoveStaleCgroups: %v", err)
	}
	if left := dirs(pid); len(left) > 0 {
		t.Errorf("cgroups left of the dead jail: %v", left)
	}
	if kept := dirs(live.InitPid()); len(kept) != len(stale) {
		t.Errorf("cgroups of the live jail: %v; want as many as %v", kept, stale)
	}
	if code, out, _ := run(t, live, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("the live jail after RemoveStaleCgroups: exit %d, %q", code, out)
	}
}

// TestJailUsage: a jail's usage counts what its commands used, those that
// ended too: the CPU time of a loop, the peak of an allocation, and its
// processes now (its init).
func TestJailUsage(t *testing.T) {
	j, ws := startJail(t)
	if !strings.HasPrefix(j.Limits, "cgroup") {
		t.Fatalf("this test needs a jail with a cgroup: %s", j.Limits)
	}
	before, err := j.Usage()
	if err != nil || !before.Measured {
		t.Fatalf("usage of a new jail: %+v, %v", before, err)
	}
	bin := installHelper(t, ws)
	// CPU time, not time on the clock: on a busy machine a 0.3 s loop on
	// the clock got 0.15 s of CPU.
	if code, out := runHelper(t, j, bin, "burn", "0.3"); code != 0 {
		t.Fatalf("burn: exit %d: %s", code, out)
	}
	if code, out := runHelper(t, j, bin, "alloc", "64"); code != 0 {
		t.Fatalf("alloc: exit %d: %s", code, out)
	}
	u, err := j.Usage()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before %+v, after %+v", before, u)
	if u.CPU-before.CPU < 200*time.Millisecond {
		t.Errorf("CPU time went from %v to %v across a loop that used 0.3 s of CPU", before.CPU, u.CPU)
	}
	if u.MemoryPeakBytes < 64<<20 {
		t.Errorf("peak memory %d after a 64 MiB allocation", u.MemoryPeakBytes)
	}
	if u.MemoryBytes > u.MemoryPeakBytes || u.Processes < 1 {
		t.Errorf("usage %+v: memory above its peak, or no process (the init runs)", u)
	}
}
