package jail

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
)

// hostProcs counts the host's processes whose command line holds marker.
func hostProcs(t *testing.T, marker string) int {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	return len(strings.Fields(string(out)))
}

// TestJailTree: a command's whole tree ends with it, is signalled as a
// whole and is killed as a whole, daemons that left its session included;
// no cgroup of it is left.
func TestJailTree(t *testing.T) {
	// Registered first, so it runs after the jail's Close: no command
	// cgroup outlives its jail.
	var treesDir string
	t.Cleanup(func() {
		if left, _ := filepath.Glob(filepath.Join(treesDir, "cmd-*")); treesDir != "" && len(left) != 0 {
			t.Errorf("command cgroups left after the jail closed: %v", left)
		}
	})
	j, ws := startJail(t)
	if j.cg == nil {
		testenv.CannotRun(t, "no cgroup for command trees: %s", j.Limits)
	}
	env, _ := Env(nil, nil)
	runCmd := func(ctx context.Context, c Cmd) (int, string) {
		t.Helper()
		var out bytes.Buffer
		c.Env, c.Stdout = env, &out
		code, err := j.Run(ctx, c)
		if err != nil {
			t.Fatalf("run %q: %v", c.Script, err)
		}
		return code, out.String()
	}

	// A daemon that called setsid ends with the command that started it.
	var pid int
	code, _ := runCmd(context.Background(), Cmd{Script: `setsid sleep 311 </dev/null >/dev/null 2>&1 & sleep 0.2; echo started`,
		Started: func(p int, _ string) { pid = p }})
	if code != 0 || pid <= 1 {
		t.Fatalf("daemonizing command: exit %d, pid %d", code, pid)
	}
	if n := hostProcs(t, "sleep 311"); n != 0 {
		t.Errorf("%d daemonized processes outlived their command", n)
	}

	// A signal reaches every process of the tree, the daemon too.
	sigs := make(chan syscall.Signal, 1)
	done := make(chan struct{})
	var got string
	go func() {
		defer close(done)
		code, got = runCmd(context.Background(), Cmd{Signals: sigs, Script: `setsid sh -c 'trap "echo daemon got TERM; exit 0" TERM; touch /workspace/daemon-ready; while :; do sleep 0.05; done' &
trap 'sleep 0.3; echo got TERM; exit 3' TERM
touch /workspace/main-ready; while :; do sleep 0.05; done`})
	}()
	waitUntil(t, func() bool {
		_, err1 := os.Stat(filepath.Join(ws, "daemon-ready"))
		_, err2 := os.Stat(filepath.Join(ws, "main-ready"))
		return err1 == nil && err2 == nil
	})
	sigs <- syscall.SIGTERM
	<-done
	if code != 3 || !strings.Contains(got, "got TERM") || !strings.Contains(got, "daemon got TERM") {
		t.Errorf("SIGTERM to the tree: exit %d, output %q; want 3, both traps", code, got)
	}

	// A cancel kills the tree, the daemon too.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, _ = runCmd(ctx, Cmd{Script: `setsid sh -c 'trap "" TERM HUP; sleep 312' & sleep 60`})
	if code != 128+9 || time.Since(start) > 10*time.Second {
		t.Errorf("canceled command: exit %d after %v", code, time.Since(start))
	}
	if n := hostProcs(t, "sleep 312"); n != 0 {
		t.Errorf("%d processes of a canceled command are left", n)
	}
	// The trees a jail keeps for its next commands are empty.
	treesDir, _ = j.cg.trees()
	left, _ := filepath.Glob(filepath.Join(treesDir, "cmd-*"))
	for _, dir := range left {
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(b) != 0 {
			t.Errorf("processes left in %s: %q", dir, b)
		}
	}
	if len(left) > maxFreeTrees {
		t.Errorf("%d command cgroups kept, more than %d", len(left), maxFreeTrees)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJailTreeEarlyCancel: commands whose context ends before the init
// answered their start (a client that hangs up at once), and commands
// stopped by a signal that early, end alone: the init, which is in the
// command's tree for the moment of the fork, lives on, and so does the
// jail. The rounds end each command before it could start.
func TestJailTreeEarlyCancel(t *testing.T) {
	j, _ := startJail(t)
	if j.cg == nil {
		testenv.CannotRun(t, "no cgroup for command trees: %s", j.Limits)
	}
	env, _ := Env(nil, nil)
	const rounds = 200
	for i := range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		signals := make(chan syscall.Signal, 1)
		if i%2 == 0 {
			cancel()
		} else {
			signals <- syscall.SIGTERM
		}
		code, err := j.Run(ctx, Cmd{Script: "exec sleep 30", Env: env, Signals: signals})
		cancel()
		if err != nil || (code != 128+int(syscall.SIGKILL) && code != 128+int(syscall.SIGTERM)) {
			t.Fatalf("round %d: exit %d, %v; want killed by its signal, the jail alive (%v)", i, code, err, j.Err())
		}
	}
	var out bytes.Buffer
	if code, err := j.Run(context.Background(), Cmd{Script: "echo alive", Env: env, Stdout: &out}); err != nil || code != 0 || out.String() != "alive\n" {
		t.Fatalf("after %d early ends: exit %d, %q, %v", rounds, code, out.String(), err)
	}
}
