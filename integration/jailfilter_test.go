package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestJailFilterAndCPU: through a real daemon and its CLI, a command in a
// thread's jail gets EPERM from the filter for an x32 call and for a
// whiteout (which would leave a 0:0 character device in the workspace),
// and a loop in it gets no more CPU than the daemon's --jail-cpu bound.
func TestJailFilterAndCPU(t *testing.T) {
	testenv.RequireCommand(t, "perl")
	d := newDaemon(t, "--jail-cpu", "50m")
	ws := d.bind("default", "t1")

	// x32's unshare(CLONE_NEWUSER): refused by the filter, not left to
	// the kernel (ENOSYS here, a user namespace where x32 is built in).
	code, out := d.execIn("t1", fmt.Sprintf(`perl -e 'syscall(0x40000000 | %d, %d) == -1 and die "refused: $!\n"'`, unix.SYS_UNSHARE, unix.CLONE_NEWUSER))
	if code == 0 || !strings.Contains(out, "refused: Operation not permitted") {
		t.Errorf("an x32 unshare in the jail: exit %d, %q; want refused with EPERM", code, out)
	}

	// renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_WHITEOUT).
	code, out = d.execIn("t1", fmt.Sprintf(`echo a > a && perl -e 'my ($a, $b) = ("a", "b"); syscall(%d, %d, $a, %d, $b, %d) == -1 and die "refused: $!\n"'`,
		unix.SYS_RENAMEAT2, unix.AT_FDCWD, unix.AT_FDCWD, unix.RENAME_WHITEOUT))
	if code == 0 || !strings.Contains(out, "refused: Operation not permitted") {
		t.Errorf("a whiteout in the jail: exit %d, %q; want refused with EPERM", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(ws, "a"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("the workspace's a after the whiteout: mode %o, %v; want the regular file", st.Mode, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "b")); !os.IsNotExist(err) {
		t.Errorf("the workspace's b after the whiteout: %v; want none", err)
	}

	// A loop for 1.5 s on the clock gets about 0.05 CPU of it, and never
	// more than the kernel's bandwidth control lets through: each CPU
	// keeps the runtime slice it took from the cgroup's quota across
	// periods (Linux 5.4 on), so a task that moves between CPUs may run
	// up to one slice per CPU beyond the quota in a period. A loop without
	// the bound gets most of a CPU. A busy machine can only give it less.
	code, out = d.execIn("t1", `perl -MTime::HiRes=time -e '$e = time + 1.5; 1 while time < $e; @t = times; printf "%.3f\n", $t[0] + $t[1]'`)
	cpu, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if code != 0 || err != nil {
		t.Fatalf("spin: exit %d, %q", code, out)
	}
	slice := 5 * time.Millisecond
	if b, err := os.ReadFile("/proc/sys/kernel/sched_cfs_bandwidth_slice_us"); err == nil {
		if us, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			slice = time.Duration(us) * time.Microsecond
		}
	}
	const quota, period = 5 * time.Millisecond, 100 * time.Millisecond // 50m
	most := float64(quota+time.Duration(runtime.NumCPU())*slice) / float64(period)
	t.Logf("a loop under --jail-cpu 50m got %.3f of a CPU (at most %.3f with %d CPUs)", cpu/1.5, most, runtime.NumCPU())
	if most >= 0.5 {
		t.Logf("with %d CPUs the kernel's slack is too wide to tell a bound loop from a free one", runtime.NumCPU())
	} else if cpu/1.5 > most {
		t.Errorf("a loop under --jail-cpu 50m got %.3f of a CPU, more than the %.3f the kernel may give it", cpu/1.5, most)
	}
	if logs := d.allLogs(); !strings.Contains(logs, "processes, 0.05 CPUs") {
		t.Errorf("the jail's limits in the log: %s", logs)
	}
}
