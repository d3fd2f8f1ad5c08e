package integration

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/internal/testenv"
)

// execIn runs a shell line in a thread's jail through the CLI and returns
// its exit code and output (stdout and stderr together).
func (d *daemon) execIn(thread, line string, extra ...string) (int, string) {
	d.t.Helper()
	args := append([]string{"exec", "--thread", thread}, extra...)
	args = append(args, "--", line)
	cmd := exec.Command(warrenBin, args...)
	cmd.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		d.t.Fatalf("warren exec: %v", err)
	}
	return 0, string(out)
}

// TestJailEscapes starts the daemon with secrets in its environment and an
// .env beside its data folder, and tries, from a command in one thread's
// jail, every way out the issue names. Each must fail and change nothing.
func TestJailEscapes(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	t.Setenv("DATABASE_URL", "postgres://server:secret@db/prod")
	d := newDaemon(t, "--jail-memory", "67108864", "--jail-procs", "128")
	dotEnv := filepath.Join(filepath.Dir(d.data), ".env")
	must(t, os.WriteFile(dotEnv, []byte("OPENAI_API_KEY=sk-server-secret\n"), 0o644))
	d.bind("default", "t1")
	other := d.bind("default", "t2")
	must(t, os.WriteFile(filepath.Join(other, "theirs.txt"), []byte("other thread's file"), 0o644))
	pid := d.cmd.Process.Pid

	// The environment: exactly the allowed names, no secret.
	checkEnvNames(t, d, "t1", "AGENT GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_KEY_1 GIT_CONFIG_VALUE_0 GIT_CONFIG_VALUE_1 HOME LANG LC_ALL PATH PWD SHLVL TEMP TMP TMPDIR _")

	tryEscapes(t, d, "t1", dotEnv, other)
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the daemon is gone: %v", err)
	}
	if _, err := os.Stat("/usr/bin/warren-escape"); err == nil {
		os.Remove("/usr/bin/warren-escape")
		t.Fatal("a command wrote /usr/bin")
	}

	// Only its own descriptors: 0, 1, 2 and the one ls opens to list.
	if code, out := d.execIn("t1", "ls /proc/self/fd | wc -l"); code != 0 || strings.TrimSpace(out) != "4" {
		_, list := d.execIn("t1", "ls -l /proc/self/fd")
		t.Errorf("descriptors in a command: %q (exit %d), want 4:\n%s", out, code, list)
	}

	// git runs no hook of the project, whether in .git/hooks or in a
	// committed core.hooksPath.
	code, out := d.execIn("t1", `set -e
git init -q repo && cd repo
git config user.email a@example.com && git config user.name agent
mkdir -p .git/hooks .githooks
printf '#!/bin/sh\ntouch /workspace/HOOK_RAN\n' > .git/hooks/pre-commit
cp .git/hooks/pre-commit .githooks/pre-commit
chmod +x .git/hooks/pre-commit .githooks/pre-commit
git config core.hooksPath .githooks
echo x > f && git add f && git commit -qm first
test ! -e /workspace/HOOK_RAN && echo no-hook`)
	if code != 0 || !strings.Contains(out, "no-hook") {
		t.Errorf("git commit with hooks: exit %d, %q", code, out)
	}

	// git's fsmonitor is off whatever the project says.
	if code, out := d.execIn("t1", `cd repo && git config core.fsmonitor /bin/false-monitor && git config --get core.fsmonitor`); code != 0 || strings.TrimSpace(out) != "false" {
		t.Errorf("core.fsmonitor in the jail: exit %d, %q; want false", code, out)
	}

	// A memory hog meets the memory limit (64 MiB here).
	if code, out := d.execIn("t1", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`); code == 0 {
		t.Errorf("a 200 MB string under 64 MiB: exit 0, %q", out)
	}

	// A fork bomb meets the process limit; the daemon and the jail go on.
	code, out = d.execIn("t1", `bomb() { bomb | bomb & }; bomb; sleep 2`, "--timeout", "4")
	t.Logf("fork bomb: exit %d", code)
	if code, out := d.execIn("t1", "echo alive"); code != 0 || out != "alive\n" {
		t.Fatalf("the jail after the fork bomb: exit %d, %q", code, out)
	}
	if _, err := d.warren("ls"); err != nil {
		t.Fatalf("the daemon after the fork bomb: %v", err)
	}
}

// checkEnvNames checks that a command in thread's jail sees exactly the
// variables named in want (sorted, space-separated), and no secret of the
// server's.
func checkEnvNames(t *testing.T, d *daemon, thread, want string) {
	t.Helper()
	code, out := d.execIn(thread, "env")
	if code != 0 {
		t.Fatalf("env: %d %s", code, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, _, _ := strings.Cut(line, "=")
		names = append(names, name)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != want || strings.Contains(out, "secret") {
		t.Errorf("env in the jail: %v\nwant %s", names, want)
	}
}

// tryEscapes tries, from a command in thread's jail, every way out the
// issue names: each must fail and change nothing. dotEnv is a secret file
// beside the data folder, other another thread's mount.
func tryEscapes(t *testing.T, d *daemon, thread, dotEnv, other string) {
	t.Helper()
	pid := d.cmd.Process.Pid
	port := testenv.HostListener(t, "host listener\n")

	for _, c := range []struct{ name, line string }{
		{"read the server's .env", "cat " + dotEnv},
		{"read the daemon's environ", fmt.Sprintf("cat /proc/%d/environ", pid)},
		{"see the daemon's process", fmt.Sprintf("test -e /proc/%d/cmdline && grep -q serve /proc/%d/cmdline", pid, pid)},
		{"signal the daemon", fmt.Sprintf("kill -9 %d", pid)},
		{"list the other thread's mount", "ls " + other},
		{"read the other thread's folder", "cat " + filepath.Join(d.data, "workspaces", "default", "t2", "theirs.txt")},
		{"reach the daemon's socket", "test -S " + d.socket},
		{"write a system folder", "touch /usr/bin/warren-escape"},
		{"mount", "mount -t tmpfs x /tmp"},
		{"a user namespace", "unshare -r id"},
		{"a device node", "mknod /tmp/sda b 8 0"},
		{"a setuid binary", "su root -c true </dev/null"},
		{"the host's loopback", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3", port)},
		{"ptrace pid 1 (the jail's init)", `perl -e 'syscall(101, 16, 1, 0, 0) == -1 and die "refused: $!\n"'`},
		{"ptrace a process of its own", `sleep 5 & perl -e 'syscall(101, 16, $ARGV[0], 0, 0) == -1 and die "refused: $!\n"' $!`},
	} {
		code, out := d.execIn(thread, c.line)
		if code == 0 || strings.Contains(out, "secret") || strings.Contains(out, "host listener") || strings.Contains(out, "other thread's file") {
			t.Errorf("%s: %q: exit %d, %q", c.name, c.line, code, out)
		}
	}
}

// TestExecTerminal: warren exec -t gives an interactive shell on a
// terminal of the jail, through a real terminal here (script(1) makes
// one), and exits with the shell's code.
func TestExecTerminal(t *testing.T) {
	testenv.RequireCommand(t, "script")
	d := newDaemon(t)
	cmd := exec.Command("script", "-qec", warrenBin+" exec -t --thread t1 -- bash", "/dev/null")
	cmd.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	in, err := cmd.StdinPipe()
	must(t, err)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	defer cmd.Process.Kill()
	for _, line := range []string{"tty; stty size\n", "exit 3\n"} {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(in, line)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("exit: %v, want 3; output %q", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no end: %q", out.String())
	}
	if got := out.String(); !strings.Contains(got, "/dev/pts/0") || !strings.Contains(got, "nobody@warren") {
		t.Errorf("terminal output %q", got)
	}
}
