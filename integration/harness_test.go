package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/client"
	"warren/internal/testenv"
)

// warrenBin is the CLI under test, built once by TestMain with the daemon
// warrend beside it.
var warrenBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if sock := os.Getenv(peerMountsEnv); sock != "" {
		return peerMounts(sock) // this binary, run as another uid by a test
	}
	dir, err := os.MkdirTemp("", "warren-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The CLI and the daemon, side by side: `warren serve` execs the
	// warrend beside it, so the tests run the daemon as users do.
	warrenBin = filepath.Join(dir, "warren")
	for _, b := range []struct{ out, pkg string }{{warrenBin, "warren/cmd/warren"}, {filepath.Join(dir, "warrend"), "warren/cmd/warrend"}} {
		build := exec.Command("go", "build", "-o", b.out, b.pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b.pkg+":", err)
			return 1
		}
	}
	restore, err := testenv.EnableFUSEURing()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer restore()
	return m.Run()
}

// daemon is one `warren serve` process under test.
type daemon struct {
	t      testing.TB
	data   string
	socket string
	args   []string // more flags for warren serve
	wrap   []string // a command warren serve is started through, which execs it (prlimit ...)

	mu   sync.Mutex
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan struct{}
}

// newDaemon prepares a data folder and starts a daemon on it. Whatever
// happens, the test's cleanup ends the daemon (by its pid) and detaches
// every mount left under the data folder.
func newDaemon(t testing.TB, serveArgs ...string) *daemon {
	t.Helper()
	return newDaemonAt(t, filepath.Join(t.TempDir(), "data"), serveArgs...)
}

// newDaemonAt is newDaemon with the data folder data (on a filesystem of
// the test's own, say).
func newDaemonAt(t testing.TB, data string, serveArgs ...string) *daemon {
	t.Helper()
	return startDaemon(t, data, nil, serveArgs)
}

// newDaemonThrough is newDaemon with warren serve started through wrap, a
// command that execs the rest of its arguments (so the pid is the
// daemon's), e.g. prlimit with limits for the daemon.
func newDaemonThrough(t testing.TB, wrap []string, serveArgs ...string) *daemon {
	t.Helper()
	return startDaemon(t, filepath.Join(t.TempDir(), "data"), wrap, serveArgs)
}

// startDaemon is what the newDaemon functions share: a daemon on data,
// started through wrap (if any) with the flags serveArgs.
func startDaemon(t testing.TB, data string, wrap, serveArgs []string) *daemon {
	t.Helper()
	testenv.RequireRootFUSE(t)
	d := &daemon{t: t, data: data, socket: filepath.Join(data, "warren.sock"), args: serveArgs, wrap: wrap}
	t.Cleanup(func() {
		d.stop()
		detachAllUnder(t, data)
		if t.Failed() {
			t.Logf("daemon logs:\n%s", d.allLogs())
		}
	})
	d.start()
	return d
}

func (d *daemon) allLogs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.logs == nil {
		return ""
	}
	return d.logs.String()
}

// start runs `warren serve` and waits until its socket answers and the
// start's background restore has served every thread of the former run
// again, so that a test may use their mount paths directly.
func (d *daemon) start() {
	d.t.Helper()
	d.startServing()
	d.waitRestored()
}

// waitRestored waits, for at most a minute, until /metrics says the
// background restore has no thread left.
func (d *daemon) waitRestored() {
	d.t.Helper()
	c := d.opsClient()
	defer c.CloseIdleConnections()
	for deadline := time.Now().Add(time.Minute); ; {
		left, ok := scrape(d.t, httpGet(d.t, c, "http://warren/metrics", http.StatusOK))["warren_restore_threads_left"]
		if !ok {
			d.t.Fatal("/metrics has no warren_restore_threads_left")
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the background restore still has %v threads to serve after a minute\n%s", left, d.allLogs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServing runs `warren serve` and waits until its socket answers,
// not for the background restore.
func (d *daemon) startServing() {
	d.t.Helper()
	cmd, done := d.launch()
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Threads(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			d.t.Fatalf("warren serve exited at start: %v\n%s", cmd.ProcessState, d.allLogs())
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("warren serve did not answer within 20s: %v\n%s", err, d.allLogs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// launch runs `warren serve` without waiting for it to serve and returns
// its command and the channel closed when it has exited.
func (d *daemon) launch() (*exec.Cmd, chan struct{}) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.logs == nil {
		d.logs = &testenv.SyncBuffer{}
	}
	argv := []string{warrenBin, "serve", "--data", d.data, "--log-level", "debug"}
	if t := os.Getenv(testenv.TransportEnv); t != "" {
		argv = append(argv, "--fuse-transport", t)
	}
	// Daemons of tests not about the disk image run without one: an
	// image on the machine's disk would take most of its free space, and
	// making one costs time. A test about it passes --disk-image itself.
	if !slices.ContainsFunc(d.args, func(a string) bool { return strings.HasPrefix(a, "--disk-image") }) {
		argv = append(argv, "--disk-image", "off")
	}
	argv = append(argv, d.args...)
	argv = append(append([]string{}, d.wrap...), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	if err := testenv.StartTied(cmd); err != nil {
		d.t.Fatalf("start warren serve: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.cmd, d.done = cmd, done
	return cmd, done
}

// stop ends the daemon with SIGTERM (SIGKILL after 20 s) and waits.
func (d *daemon) stop() {
	d.signal(syscall.SIGTERM, 20*time.Second)
}

// kill9 ends the daemon with SIGKILL, as a crash would, and waits.
func (d *daemon) kill9() {
	d.signal(syscall.SIGKILL, 10*time.Second)
}

func (d *daemon) signal(sig syscall.Signal, grace time.Duration) {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
		d.t.Errorf("warren serve (pid %d) did not stop within %v of %v", cmd.Process.Pid, grace, sig)
	}
}

// warren runs the CLI against this daemon and returns its stdout.
func (d *daemon) warren(args ...string) (string, error) {
	d.t.Helper()
	cmd := exec.Command(warrenBin, args...)
	cmd.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("warren %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// mustWarren is warren that fails the test on error.
func (d *daemon) mustWarren(args ...string) string {
	d.t.Helper()
	out, err := d.warren(args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

// bind binds a thread through the CLI and returns its mount path.
func (d *daemon) bind(tenant, thread string) string {
	d.t.Helper()
	return strings.TrimSpace(d.mustWarren("bind", "--tenant", tenant, "--thread", thread))
}

// detachAllUnder lazily unmounts every mount below dir, deepest first,
// then clears the immutable flag of the mount points of a data folder dir
// so that the test's folders can be removed.
func detachAllUnder(t testing.TB, dir string) {
	defer testenv.UnsealMountPoints(t, dir)
	for range 4 {
		mps := testenv.MountsUnder(t, dir)
		if len(mps) == 0 {
			return
		}
		for i := len(mps) - 1; i >= 0; i-- {
			unix.Unmount(mps[i], unix.MNT_DETACH)
		}
	}
}

// fdTargets lists what the open descriptors of process pid name; one
// closed meanwhile is left out.
func fdTargets(t testing.TB, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("descriptors of %d: %v", pid, err)
	}
	targets := make([]string, 0, len(ents))
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			targets = append(targets, target)
		}
	}
	return targets
}

// countFDs counts the open descriptors of process pid.
func countFDs(t testing.TB, pid int) int {
	t.Helper()
	return len(fdTargets(t, pid))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
