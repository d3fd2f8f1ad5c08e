package jail

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

func TestMain(m *testing.M) {
	if IsInit() {
		RunInit()
	}
	if name := os.Getenv(helperVar); name != "" {
		os.Exit(helperMain(name, os.Args[1:]))
	}
	if os.Getenv(baseVar) != "" && os.Geteuid() == 0 {
		b, err := NewBase(BaseConfig{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		suiteBase = b
	}
	code := m.Run()
	if suiteBase != nil {
		suiteBase.Close()
	}
	removeSuiteImages()
	os.Exit(code)
}

// baseVar, set, starts the suite's jails from a Base (base_linux.go), as
// the gateway starts them: the suite runs once each way.
const baseVar = "WARREN_JAIL_BASE"

// suiteBase is the suite's Base when baseVar is set; TestMain makes it
// before any test runs and closes it after, and no test changes it.
var suiteBase *Base

// based returns cfg starting from the suite's Base, if it has one and cfg
// fits it.
func based(cfg Config) Config {
	if suiteBase != nil && cfg.Base == nil && cfg.ReadOnly == nil && cfg.Binary == "" {
		cfg.Base = suiteBase
	}
	return cfg
}

// startJail starts a jail over a fresh workspace, with a secret file and a
// secret variable on the host side, and ends it when the test ends.
func startJail(t *testing.T) (*Jail, string) {
	t.Helper()
	return startJailWith(t, Config{})
}

func startJailWith(t *testing.T, cfg Config) (*Jail, string) {
	t.Helper()
	testenv.RequireRoot(t)
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	// The workspace belongs to the jail's user, as the gateway will make
	// it.
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, NobodyID, NobodyID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("OPENAI_API_KEY=sk-server-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Workspace = ws
	j, err := Start(ctx, based(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, ws
}

// run runs a shell line in j and returns its exit code and output.
func run(t *testing.T, j *Jail, line string) (int, string, string) {
	t.Helper()
	env, err := Env(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return runEnv(t, j, env, line)
}

// runEnv runs a shell line in j with the environment env.
func runEnv(t *testing.T, j *Jail, env []string, line string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := j.Run(ctx, Cmd{Args: []string{"/bin/sh", "-c", line}, Env: env, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("run %q: %v", line, err)
	}
	return code, out.String(), errOut.String()
}

func TestJailRunsInWorkspace(t *testing.T) { forRoots(t, nil, testJailRunsInWorkspace) }

func testJailRunsInWorkspace(t *testing.T, r testRoot) {
	j, ws := startJailOn(t, r, Config{})
	code, out, errOut := run(t, j, `pwd; id -u; id -g; hostname; echo made > here`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "/workspace\n65534\n65534\nwarren\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "here")); err != nil || string(got) != "made\n" {
		t.Errorf("the workspace on the host holds %q, %v", got, err)
	}
	if code, _, _ := run(t, j, `exit 7`); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	if code, _, _ := run(t, j, `kill -9 $$`); code != 128+9 {
		t.Errorf("killed: exit code %d, want 137", code)
	}
}

// TestJailEnvironment: a command sees the environment it was given
// (EnvFor: on an image, the image's variables too) and what its shell
// adds, and nothing of the server's.
func TestJailEnvironment(t *testing.T) { forRoots(t, nil, testJailEnvironment) }

func testJailEnvironment(t *testing.T, r testRoot) {
	cfg := r.on(t, Config{})
	j, _ := startJailWith(t, cfg)
	env, err := EnvFor(cfg.Image, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := runEnv(t, j, env, `env`)
	if code != 0 {
		t.Fatal(code)
	}
	var names []string
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, value, _ := strings.Cut(line, "=")
		switch name {
		case "PWD", "SHLVL", "_": // the shell's own (dash sets PWD, busybox's sh SHLVL too)
			continue
		}
		names = append(names, name)
		got[name] = value
	}
	sort.Strings(names)
	want := []string{"AGENT", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_VALUE_1",
		"HOME", "LANG", "LC_ALL", "PATH", "TEMP", "TMP", "TMPDIR"}
	wantPath := Path
	if cfg.Image != nil {
		want = append(want, "FOO_VERSION")
		sort.Strings(want)
		wantPath = "/opt/tools/bin:/bin"
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("env names %v, want %v", names, want)
	}
	if got["HOME"] != Home || got["PATH"] != wantPath {
		t.Errorf("HOME=%s PATH=%s, want HOME=%s PATH=%s", got["HOME"], got["PATH"], Home, wantPath)
	}
	if strings.Contains(out, "sk-server-secret") {
		t.Error("the server's secret is in the jail's environment")
	}
}

// TestJailSeesNothingOfTheHost: the host's files outside the system
// folders are not there, the system folders are read-only, /proc shows
// only the jail's processes, and the network is loopback only.
func TestJailSeesNothingOfTheHost(t *testing.T) { forRoots(t, nil, testJailSeesNothingOfTheHost) }

func testJailSeesNothingOfTheHost(t *testing.T, r testRoot) {
	j, ws := startJailOn(t, r, Config{})
	host := filepath.Dir(ws)
	for _, c := range []struct{ name, line string }{
		{"the .env beside the workspace", "cat " + filepath.Join(host, ".env")},
		{"the host's folder of the workspace", "ls " + host},
		{"a write to /usr", "touch /usr/x"},
		{"a write to /etc", "touch /etc/x"},
		{"a write to /", "touch /x"},
		{"the root's home", "ls /root"},
		{"the host's /var", "ls /var/lib"},
		{"/sys", "ls /sys/class"},
		{"a mount", "mount -t tmpfs x /tmp"},
	} {
		if code, out, _ := run(t, j, c.line); code == 0 {
			t.Errorf("%s: %q succeeded: %q", c.name, c.line, out)
		}
	}
	if _, err := os.Stat("/usr/x"); err == nil {
		t.Fatal("/usr/x exists on the host")
	}
	code, out, _ := run(t, j, `ls /proc | grep -E '^[0-9]+$' | sort -n | head -n 1`)
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Errorf("lowest pid in the jail's /proc: %q (exit %d), want 1", out, code)
	}
	if _, out, _ := run(t, j, `cat /proc/1/cmdline | tr '\0' ' '`); strings.Contains(out, "sk-") || !strings.Contains(out, InitArg) {
		t.Errorf("pid 1 of the jail is %q", out)
	}
	if code, out, _ := run(t, j, `ls /sys/class/net 2>/dev/null || cat /proc/net/dev`); code != 0 || strings.Contains(out, "eth") {
		t.Errorf("network devices: %q", out)
	}
	if code, _, errOut := run(t, j, `echo x > /tmp/t && cat /tmp/t >/dev/null`); code != 0 {
		t.Errorf("the private /tmp is not writable: %s", errOut)
	}
}

// TestJailCancel: a command whose context ends is killed with its whole
// session, and the jail goes on.
func TestJailCancel(t *testing.T) {
	j, _ := startJail(t)
	env, _ := Env(nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, err := j.Run(ctx, Cmd{Args: []string{"/bin/sh", "-c", "sleep 100 & sleep 100"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if code != 128+9 || time.Since(start) > 10*time.Second {
		t.Fatalf("cancelled command: exit %d after %v, want 137 at once", code, time.Since(start))
	}
	// The background sleep died with its session: only init, the shell
	// and its children are left.
	code, out, _ := run(t, j, `for p in /proc/[0-9]*; do cat $p/comm; done | grep -c '^sleep$'`)
	if strings.TrimSpace(out) != "0" {
		t.Errorf("sleeps left in the jail after the cancel: %q (exit %d)", out, code)
	}
}

// TestJailSeccomp: the calls the filter shuts fail, and ordinary work
// still runs.
func TestJailSeccomp(t *testing.T) { forRoots(t, nil, testJailSeccomp) }

func testJailSeccomp(t *testing.T, r testRoot) {
	j, _ := startJailOn(t, r, Config{})
	for _, line := range []string{
		"unshare -U true",
		"unshare -r true",
		"unshare -m true",
		"unshare -n true",
		"mount -t tmpfs x /tmp",
	} {
		code, _, errOut := run(t, j, line)
		if code == 0 {
			t.Errorf("%q succeeded in the jail", line)
		} else {
			t.Logf("%q: exit %d: %s", line, code, strings.TrimSpace(errOut))
		}
	}
	if code, out, errOut := run(t, j, `mkdir -p d && cd d && echo hi > f && cat f | tr a-z A-Z && ls -la >/dev/null && (sleep 0.01 &) && wait`); code != 0 || out != "HI\n" {
		t.Errorf("ordinary work: exit %d, %q, %s", code, out, errOut)
	}
}

// TestJailNetworkNone: the jail has a loopback of its own, and the host's
// loopback listeners are out of its reach.
func TestJailNetworkNone(t *testing.T) { forRoots(t, withBash, testJailNetworkNone) }

func testJailNetworkNone(t *testing.T, r testRoot) {
	testenv.RequireCommand(t, "bash")
	j, _ := startJailOn(t, r, Config{})
	port := testenv.HostListener(t, "host secret\n")
	code, out, errOut := run(t, j, fmt.Sprintf(`exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3'`, port))
	if code == 0 || strings.Contains(out, "host secret") {
		t.Fatalf("the jail reached the host's listener: exit %d, %q", code, out)
	}
	if !strings.Contains(errOut, "refused") {
		t.Errorf("connecting in the jail: %q; want connection refused (its own loopback, up)", errOut)
	}
}

// TestJailLimits: a fork bomb and a memory hog are stopped by the jail's
// cgroup, and the jail goes on working.
func TestJailLimits(t *testing.T) {
	// Not over the bash image: bash's command substitution crawls for
	// seconds near the memory bound before the kernel ends it, which
	// tells nothing the busybox image does not.
	forRoots(t, func(r testRoot) bool { return r.name != "bash" }, testJailLimits)
}

func testJailLimits(t *testing.T, r testRoot) {
	j, _ := startJailOn(t, r, Config{MemoryBytes: 64 << 20, MaxProcs: 48})
	if !strings.HasPrefix(j.Limits, "cgroup") {
		testenv.CannotRun(t, "no cgroup for limits: %s", j.Limits)
	}
	t.Log(j.Limits)
	code, out, errOut := run(t, j, `n=0; for i in $(seq 200); do sleep 30 & n=$((n+1)); done; echo started`)
	if !strings.Contains(errOut, "fork") {
		t.Errorf("200 background sleeps under a limit of 48 processes: exit %d, %q, stderr %q", code, out, errOut)
	}
	// The kernel kills the largest process of the cgroup, the shell
	// that holds the string, mostly; when it takes head or tr instead,
	// the shell goes on with what it had got, less than the whole.
	code, out, _ = run(t, j, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`)
	if code == 0 && strings.TrimSpace(out) == "200000000" {
		t.Errorf("a 200 MB string under a limit of 64 MiB: exit 0, %q", out)
	}
	if code, out, _ := run(t, j, `echo still here`); code != 0 || out != "still here\n" {
		t.Fatalf("the jail after the fork bomb and the hog: exit %d, %q", code, out)
	}
}

// TestJailRlimits: without a cgroup (forced here), rlimits stop the fork
// bomb and the memory hog, a command cannot raise them, and the jail goes
// on working.
func TestJailRlimits(t *testing.T) {
	j, _ := startJailWith(t, Config{MemoryBytes: 64 << 20, MaxProcs: 48, Rlimits: true})
	if !strings.HasPrefix(j.Limits, "rlimits") {
		t.Fatalf("limits of a jail asked for rlimits: %s", j.Limits)
	}
	code, out, errOut := run(t, j, `for i in $(seq 200); do sleep 30 & done; echo started`)
	if !strings.Contains(errOut, "fork") {
		t.Errorf("200 background sleeps under a limit of 48 processes: exit %d, %q, stderr %q", code, out, errOut)
	}
	code, _, _ = run(t, j, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`)
	if code == 0 {
		t.Errorf("a 200 MB string under a limit of 64 MiB: exit 0")
	}
	if _, out, _ := run(t, j, `ulimit -v unlimited 2>/dev/null; echo $?; ulimit -Hv`); out == "0\n65536\n" || !strings.HasSuffix(out, "\n65536\n") {
		t.Errorf("raising the address space limit: %q; want refused, hard limit 65536 KiB", out)
	}
	if code, out, _ := run(t, j, `echo still here`); code != 0 || out != "still here\n" {
		t.Fatalf("the jail after the fork bomb and the hog: exit %d, %q", code, out)
	}
}

// TestJailNoInheritedFds: a descriptor the gateway's process holds without
// close-on-exec (as libraries leave some) never reaches a command.
func TestJailNoInheritedFds(t *testing.T) {
	testenv.RequireRoot(t)
	leak, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY, 0) // no O_CLOEXEC on purpose
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leak)
	forRoots(t, nil, func(t *testing.T, r testRoot) {
		j, _ := startJailOn(t, r, Config{})
		if code, out, _ := run(t, j, `ls /proc/self/fd | wc -l`); code != 0 || strings.TrimSpace(out) != "4" {
			_, list, _ := run(t, j, `ls -l /proc/self/fd`)
			t.Fatalf("descriptors in a command: %q (exit %d), want 0, 1, 2 and ls's own:\n%s", out, code, list)
		}
	})
}

// startJailAfter starts a jail whose init is started through a shell that
// runs prelude first, as a daemon in the state prelude makes would start
// it (prelude's umask, signals it ignores).
func startJailAfter(t *testing.T, prelude string) *Jail {
	t.Helper()
	testenv.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "init")
	script := "#!/bin/sh\n" + prelude + "\nexec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	j, _ := startJailWith(t, Config{Binary: path})
	return j
}

// TestJailUmask: the commands of a daemon started under umask 077 (as
// root's shell may be) start with umask 022 all the same: the daemon's
// umask is its own, not the agents' (theirs made every file they wrote
// readable by its owner alone).
func TestJailUmask(t *testing.T) {
	j := startJailAfter(t, "umask 077")
	code, out, errOut := run(t, j, `umask; echo x > /workspace/f; echo y > /tmp/g; stat -c %a /workspace/f /tmp/g`)
	if code != 0 || out != "0022\n644\n644\n" {
		t.Errorf("a command of a daemon under umask 077: exit %d, %q, %q; want umask 0022 and files of mode 644", code, out, errOut)
	}
}

// TestJailSignalsAtDefault: a daemon started with signals ignored (nohup
// ignores SIGHUP, a script's `warrend &` SIGINT and SIGQUIT, make 32 and
// 33) hands that on to the processes it starts; a jail's commands start
// with no signal ignored or blocked all the same, so that a command can
// trap SIGHUP and an interrupt sent to it ends it. The init is started
// here through a shell that ignores some of each kind first (real-time
// ones too), as such a daemon would start it.
func TestJailSignalsAtDefault(t *testing.T) {
	j := startJailAfter(t, "trap '' HUP INT QUIT TERM USR1 PIPE 34 64")
	code, out, _ := run(t, j, `grep -E '^Sig(Ign|Blk)' /proc/self/status`)
	if want := "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"; code != 0 || out != want {
		t.Errorf("a command's blocked and ignored signals: %q (exit %d), want %q", out, code, want)
	}
	// And what users see: a trap of SIGHUP runs, SIGINT ends a command.
	code, out, _ = run(t, j, `trap 'echo got hup; exit 7' HUP; kill -HUP $$; echo missed`)
	if code != 7 || out != "got hup\n" {
		t.Errorf("a command that traps SIGHUP and gets it: exit %d, %q", code, out)
	}
	if code, out, _ = run(t, j, `sh -c 'kill -INT $$; echo missed'`); code != 128+int(unix.SIGINT) {
		t.Errorf("a command sent SIGINT: exit %d, %q, want %d", code, out, 128+int(unix.SIGINT))
	}
	// The init's own are at their default now too, and the kernel gives
	// a namespace's init no signal from inside that it has no handler
	// for: a command cannot end its jail with them.
	if code, out, _ = run(t, j, `kill -HUP 1; kill -INT 1; kill -QUIT 1; kill -34 1; echo sent`); code != 0 || out != "sent\n" {
		t.Errorf("signals to the init: exit %d, %q", code, out)
	}
	if code, out, _ = run(t, j, `echo alive`); code != 0 || out != "alive\n" {
		t.Errorf("the jail after its commands signalled its init: exit %d, %q", code, out)
	}
}

// TestJailCapabilities: a command holds no capability and could gain none.
func TestJailCapabilities(t *testing.T) { forRoots(t, nil, testJailCapabilities) }

func testJailCapabilities(t *testing.T, r testRoot) {
	j, _ := startJailOn(t, r, Config{})
	code, out, _ := run(t, j, `grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status`)
	if code != 0 {
		t.Fatal(code)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, "0000000000000000") {
			t.Errorf("capabilities of a command: %q", line)
		}
	}
	if strings.Count(out, "\n") != 5 {
		t.Errorf("capability lines: %q", out)
	}
	// And it runs with no_new_privs and the seccomp filter, whichever of
	// the init's threads started it.
	for range 5 {
		_, out, _ := run(t, j, `grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t ' ' '`)
		if out != "NoNewPrivs: 1\nSeccomp: 2\n" {
			t.Fatalf("a command's status: %q", out)
		}
	}
}

// TestJailLandlock: where a mount would let a command write, Landlock does
// not, outside /workspace, /tmp, /home/agent, /dev/shm and the devices;
// and / and /etc are not written, on any root.
func TestJailLandlock(t *testing.T) { forRoots(t, nil, testJailLandlock) }

func testJailLandlock(t *testing.T, r testRoot) {
	j, _ := startJailOn(t, r, Config{})
	if code, _, _ := run(t, j, `echo renamed > /proc/self/comm`); code == 0 {
		t.Error("a command rewrote /proc/self/comm: no Landlock")
	}
	for _, line := range []string{`echo x > /x`, `echo x > /etc/x`, `mkdir /etc/d`, `echo x >> /etc/passwd`, `echo x > /home/x`} {
		if code, _, _ := run(t, j, line); code == 0 {
			t.Errorf("%q succeeded in the jail", line)
		}
	}
	if code, _, errOut := run(t, j, `echo x > /workspace/w && echo x > /tmp/t && echo x > /home/agent/h && mkdir -p /home/agent/.cache/d && echo x > /dev/shm/s && echo x > /dev/null && mkdir /tmp/d && rm -r /tmp/d /workspace/w /home/agent/.cache`); code != 0 {
		t.Errorf("writes where commands write: exit %d: %s", code, errOut)
	}
}

// TestJailTty: a command on a terminal of its own sees a tty of the
// jail's devpts with the size asked for, follows a resize, and cannot
// push input into its terminal (TIOCSTI).
func TestJailTty(t *testing.T) {
	testenv.RequireCommand(t, "stty")
	testenv.RequireCommand(t, "perl")
	j, _ := startJail(t)
	env, _ := Env(nil, nil)
	stdinR, stdinW := io.Pipe()
	resize := make(chan Winsize, 1)
	var out testenv.SyncBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		code, err := j.Run(ctx, Cmd{
			Args: []string{"/bin/sh", "-c", `tty; stty size; read line; stty size; echo "got $line"`},
			Env:  env, Tty: true, Size: Winsize{Rows: 24, Cols: 80},
			Stdin: stdinR, Stdout: &out, Resize: resize,
		})
		if err != nil {
			t.Error(err)
		}
		done <- code
	}()
	waitFor(t, &out, "24 80")
	resize <- Winsize{Rows: 50, Cols: 132}
	time.Sleep(100 * time.Millisecond) // the ioctl is applied by Run's own goroutine
	io.WriteString(stdinW, "hello\n")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %q", code, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no end: %q", out.String())
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, want := range []string{"/dev/pts/0\n", "24 80\n", "50 132\n", "got hello\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output %q lacks %q", got, want)
		}
	}
	// TIOCSTI (0x5412) into its own terminal is refused.
	var o testenv.SyncBuffer
	code, err := j.Run(ctx, Cmd{Args: []string{"/usr/bin/perl", "-e", `my $c = "x"; ioctl(STDIN, 0x5412, $c) or die "refused: $!\n"`}, Env: env, Tty: true, Stdout: &o})
	if err != nil || code == 0 || !strings.Contains(o.String(), "refused") {
		t.Errorf("TIOCSTI in the jail: exit %d, %v, %q", code, err, o.String())
	}
	t.Logf("TIOCSTI: %q", strings.TrimSpace(o.String()))
}

func waitFor(t *testing.T, b *testenv.SyncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %q; have %q", s, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJailNameserver: a jail given a name server reads it in its
// /etc/resolv.conf, read-only, while the host's file is untouched; an
// egress jail has a network namespace of its own, which NetNS opens.
func TestJailNameserver(t *testing.T) { forRoots(t, nil, testJailNameserver) }

func testJailNameserver(t *testing.T, r testRoot) {
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		testenv.CannotRun(t, "the host has no /etc/resolv.conf for a jail to cover: %v", err)
	}
	j, _ := startJailOn(t, r, Config{Network: "egress", Nameserver: "10.255.0.1"})
	code, out, errOut := run(t, j, `cat /etc/resolv.conf; echo x >> /etc/resolv.conf && echo WROTE`)
	if !strings.Contains(out, "nameserver 10.255.0.1\n") || strings.Count(out, "nameserver") != 1 {
		t.Errorf("the jail's resolv.conf: exit %d, %q, %s", code, out, errOut)
	}
	if strings.Contains(out, "WROTE") {
		t.Errorf("the jail wrote its resolv.conf")
	}
	if after, _ := os.ReadFile("/etc/resolv.conf"); string(after) != string(host) {
		t.Errorf("the host's resolv.conf changed: %q", after)
	}
	ns, err := j.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var jailSt, hostSt unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &jailSt); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat("/proc/self/ns/net", &hostSt); err != nil {
		t.Fatal(err)
	}
	if jailSt.Ino == hostSt.Ino {
		t.Errorf("an egress jail shares the host's network namespace")
	}
	if _, err := Start(context.Background(), Config{Workspace: "/tmp", Nameserver: "10.0.0.1; rm -rf /"}); err == nil || !strings.Contains(err.Error(), "not an address") {
		t.Errorf("a hostile name server: %v", err)
	}
}
