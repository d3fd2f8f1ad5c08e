package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

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

	// A loop for 1.5 s on the clock gets at most about 0.05 CPU of it. A
	// busy machine can only give it less.
	code, out = d.execIn("t1", `perl -MTime::HiRes=time -e '$e = time + 1.5; 1 while time < $e; @t = times; printf "%.3f\n", $t[0] + $t[1]'`)
	cpu, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if code != 0 || err != nil {
		t.Fatalf("spin: exit %d, %q", code, out)
	}
	t.Logf("a loop under --jail-cpu 50m got %.3f of a CPU", cpu/1.5)
	if cpu/1.5 > 0.1 {
		t.Errorf("a loop under --jail-cpu 50m got %.3f of a CPU", cpu/1.5)
	}
	if logs := d.allLogs(); !strings.Contains(logs, "processes, 0.05 CPUs") {
		t.Errorf("the jail's limits in the log: %s", logs)
	}
}
