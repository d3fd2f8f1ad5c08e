package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"warren/internal/testenv"
	"warren/jail"
)

func TestMain(m *testing.M) {
	// The gateway these tests start re-executes this binary as its jails'
	// init.
	if jail.IsInit() {
		jail.RunInit()
	}
	// Run as `warren serve` by TestServeExecsDaemon.
	if self := os.Getenv(execDaemonEnv); self != "" {
		fmt.Fprintln(os.Stderr, execDaemon(self, os.Args[1:], os.Environ()))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestExecVerb(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "exec", "--thread", "t1", "--env", "WHO=agent", "--", "sh", "-c", `echo "$WHO in $(pwd)"; echo err >&2; exit 5`)
	if code != 5 || out != "agent in /workspace\n" || errOut != "err\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 5, the output", code, out, errOut)
	}
	if code, out, _ := runCLI(t, sock, "exec", "--thread", "t1", "--", "mkdir -p d && cd d && ls -a | head -1"); code != 0 || out != ".\n" {
		t.Errorf("one-argument script: exit %d, %q", code, out)
	}
	if code, _, errOut := runCLI(t, sock, "exec", "--thread", "t1", "--cwd", "/etc", "--", "true"); code != 1 || errOut == "" {
		t.Errorf("cwd outside: exit %d, %q; want 1 and an error", code, errOut)
	}
	if code, _, _ := runCLI(t, sock, "exec", "--thread", "t1"); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}

	// A thread's settings, given with bind.
	if code, _, errOut := runCLI(t, sock, "bind", "--thread", "t2", "--env", "FOO=bar", "--network", "host", "--procs", "100"); code != 0 {
		t.Fatalf("bind with settings: exit %d, %q", code, errOut)
	}
	if code, out, _ := runCLI(t, sock, "exec", "--thread", "t2", "--", `echo $FOO; ls /proc/net/dev >/dev/null && wc -l < /proc/net/dev`); code != 0 || !strings.HasPrefix(out, "bar\n") {
		t.Errorf("a command of a thread with settings: exit %d, %q", code, out)
	}
	if code, _, errOut := runCLI(t, sock, "bind", "--thread", "t2", "--network", "none"); code != 1 || !strings.Contains(errOut, "close the thread before you change its network") {
		t.Errorf("another network for a running jail: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, sock, "bind", "--thread", "t2", "--network", "wifi"); code != 1 || !strings.Contains(errOut, "not none, egress or host") {
		t.Errorf("a bad network: exit %d, %q", code, errOut)
	}
}

// TestExecSaysWhy: exec prints why the command ended so on stderr after
// its output (its timeout), and nothing for a command that exits 137 by
// itself; logs -f prints a stopped job's note at its end, and jobs lists
// it.
func TestExecSaysWhy(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	const timedOut = "warren: timed out after 1s (the command's timeout)\n"
	if code, _, errOut := runCLI(t, sock, "exec", "--thread", "t1", "--timeout", "1", "--", "echo started >&2; sleep 5"); code != 124 || errOut != "started\n"+timedOut {
		t.Errorf("exec --timeout 1: exit %d, stderr %q; want 124, %q", code, errOut, "started\n"+timedOut)
	}
	if code, _, errOut := runCLI(t, sock, "exec", "--thread", "t1", "--", "exit 137"); code != 137 || errOut != "" {
		t.Errorf("exec of exit 137: exit %d, stderr %q; want 137 and nothing", code, errOut)
	}
	if code, out, errOut := runCLI(t, sock, "spawn", "--thread", "t1", "--", "sleep 60"); code != 0 || out != "bash-1\n" {
		t.Fatalf("spawn: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, sock, "kill", "--thread", "t1", "bash-1"); code != 0 {
		t.Fatalf("kill: exit %d, %q", code, errOut)
	}
	const stopped = "killed: stopped by the client (SIGTERM)"
	if code, _, errOut := runCLI(t, sock, "logs", "-f", "--thread", "t1", "bash-1"); code != 143 || errOut != "warren: "+stopped+"\n" {
		t.Errorf("logs -f of a stopped job: exit %d, stderr %q", code, errOut)
	}
	if _, out, _ := runCLI(t, sock, "jobs", "--thread", "t1"); !strings.Contains(out, stopped) {
		t.Errorf("jobs of a stopped job: %q", out)
	}
}
