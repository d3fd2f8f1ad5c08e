package jail

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runHelper runs helper name of the test binary at bin in j, with args,
// and returns its exit code and output.
func runHelper(t *testing.T, j *Jail, bin, name string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := j.Run(ctx, Cmd{Args: append([]string{bin}, args...), Env: helperEnv(t, name), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("helper %s %q: %v", name, args, err)
	}
	return code, strings.TrimSpace(out.String())
}

// TestJailX32Refused: a call with the x32 bit set is refused by the
// filter (EPERM), not left to the kernel: on a kernel built with x32 it
// would run, under a number no rule of the filter knows. The plain calls
// beside them are refused as before, and an ordinary call still runs.
func TestJailX32Refused(t *testing.T) { forRoots(t, withHelpers, testJailX32Refused) }

func testJailX32Refused(t *testing.T, r testRoot) {
	j, ws := startJailOn(t, r, Config{})
	bin := installHelper(t, ws)
	const x32 = 0x40000000
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"x32 unshare(CLONE_NEWUSER)", []string{fmt.Sprint(x32 | unix.SYS_UNSHARE), fmt.Sprint(unix.CLONE_NEWUSER)}, "EPERM"},
		{"x32 ptrace (its own number)", []string{fmt.Sprint(x32 | 521), "0"}, "EPERM"},
		{"x32 ioctl TIOCSTI (its own number)", []string{fmt.Sprint(x32 | 514), "0", fmt.Sprint(unix.TIOCSTI), "0"}, "EPERM"},
		{"x32 getpid", []string{fmt.Sprint(x32 | unix.SYS_GETPID)}, "EPERM"},
		{"a number above x32's", []string{fmt.Sprint(0x80000000 | unix.SYS_UNSHARE), fmt.Sprint(unix.CLONE_NEWUSER)}, "EPERM"},
		{"unshare(CLONE_NEWUSER)", []string{fmt.Sprint(unix.SYS_UNSHARE), fmt.Sprint(unix.CLONE_NEWUSER)}, "EPERM"},
		{"getpid", []string{fmt.Sprint(unix.SYS_GETPID)}, "ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runHelper(t, j, bin, "syscall", c.args...)
			if code != 0 || out != c.want {
				t.Errorf("syscall %v in the jail: exit %d, %q; want %s", c.args, code, out, c.want)
			}
		})
	}
}

// TestJailWhiteoutRefused: renameat2 with RENAME_WHITEOUT, which leaves a
// 0:0 character device behind, is refused in the jail, in the workspace
// and in /tmp: the file stays where it was, and no device node appears.
// A plain rename still moves.
func TestJailWhiteoutRefused(t *testing.T) { forRoots(t, withHelpers, testJailWhiteoutRefused) }

func testJailWhiteoutRefused(t *testing.T, r testRoot) {
	j, ws := startJailOn(t, r, Config{})
	bin := installHelper(t, ws)
	for _, dir := range []string{Workspace, Tmp} {
		code, out := runHelper(t, j, bin, "whiteout", dir)
		if code != 0 || out != "EPERM file" {
			// What is left there: the file when refused, a device
			// node when the whiteout was made.
			code, ls, _ := run(t, j, "ls -l "+dir)
			t.Errorf("renameat2(RENAME_WHITEOUT) in %s: %q; want EPERM, the file left in place (ls: exit %d\n%s)", dir, out, code, ls)
		}
	}
	if code, out, errOut := run(t, j, `echo x > /tmp/c && mv /tmp/c /tmp/d && cat /tmp/d`); code != 0 || out != "x\n" {
		t.Errorf("a plain rename in the jail: exit %d, %q, %s", code, out, errOut)
	}
}
