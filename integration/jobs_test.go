package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestJobsAfterKill9: a daemon killed with SIGKILL while a job runs. The
// job dies with it (its jail does), the restarted daemon notes it stopped
// exactly once, job ids go on without repeating, and no cgroup of the
// dead jail is left.
func TestJobsAfterKill9(t *testing.T) {
	d := newDaemon(t, "--host-id", "host-a")
	if id := strings.TrimSpace(d.mustWarren("spawn", "--thread", "t1", "--", "sleep 300")); id != "bash-1" {
		t.Fatalf("first job: %q", id)
	}
	if id := strings.TrimSpace(d.mustWarren("spawn", "--thread", "t1", "--", "echo done")); id != "bash-2" {
		t.Fatalf("second job: %q", id)
	}
	// It ends, and its end is recorded, before the crash.
	if out := d.mustWarren("logs", "-f", "--thread", "t1", "bash-2"); out != "done\n" {
		t.Fatalf("output of the second job: %q", out)
	}
	initPid := jailInit(t, d.cmd.Process.Pid)
	// Opened while the daemon lives: the init is its child, unreaped, so
	// the pid is still the init's.
	initFd, err := unix.PidfdOpen(initPid, 0)
	must(t, err)
	defer unix.Close(initFd)
	d.kill9()
	// The jail dies with its daemon's process (jail/doc.go), and with it
	// the job.
	if !pidfdEnds(t, initFd, 10*time.Second) {
		t.Fatalf("the jail's init %d still runs 10 s after its daemon's kill -9", initPid)
	}
	d.start()
	out := d.mustWarren("jobs", "--thread", "t1")
	note := "Background job bash-1 stopped when the host restarted."
	if strings.Count(out, note) != 1 || strings.Contains(out, "running") {
		t.Errorf("jobs after kill -9:\n%s", out)
	}
	if strings.Contains(out, "Background job bash-2") {
		t.Errorf("a job that had ended got a restart note:\n%s", out)
	}
	if id := strings.TrimSpace(d.mustWarren("spawn", "--thread", "t1", "--", "true")); id != "bash-3" {
		t.Errorf("job after kill -9: %q, want bash-3", id)
	}
	// A second restart notes nothing again.
	d.stop()
	d.start()
	if out := d.mustWarren("jobs", "--thread", "t1"); strings.Count(out, note) != 1 {
		t.Errorf("jobs after a second restart:\n%s", out)
	}
	if n := strings.Count(d.allLogs(), "job stopped by a restart"); n != 1 {
		t.Errorf("%d restart notes in the logs, want 1", n)
	}
	for _, h := range []string{"memory", "pids"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "warren", "jail-"+strconv.Itoa(initPid))); err == nil {
			t.Errorf("the dead jail's %s cgroup is left", h)
		}
	}
}

// pidfdEnds waits until the process of pidfd has ended, at most d, and
// reports whether it has.
func pidfdEnds(t *testing.T, pidfd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); ; {
		left := max(time.Until(deadline), 0)
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			t.Fatalf("poll a pidfd: %v", err)
		case n > 0:
			return true
		case left == 0:
			return false
		}
	}
}

// jailInit finds the pid of the jail init that daemon pid started.
func jailInit(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// Any thread of the daemon may have started it.
		tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					return n
				}
			}
		}
	}
	t.Fatal("no jail init under the daemon")
	return 0
}
