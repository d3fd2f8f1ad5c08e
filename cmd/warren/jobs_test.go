package main

import (
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
)

// TestJobVerbs: spawn prints the id, jobs lists it, logs prints and
// follows its output and ends like it, kill stops it.
func TestJobVerbs(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "spawn", "--thread", "t1", "--user", "ana", "--", "sh", "-c", "echo one; sleep 0.3; echo two; exit 4")
	if code != 0 || out != "bash-1\n" {
		t.Fatalf("spawn: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := runCLI(t, sock, "logs", "-f", "--thread", "t1", "bash-1"); code != 4 || out != "one\ntwo\n" {
		t.Errorf("logs -f: exit %d, %q; want 4 and the whole output", code, out)
	}
	code, out, _ = runCLI(t, sock, "jobs", "--thread", "t1")
	if code != 0 || !strings.Contains(out, "bash-1") || !strings.Contains(out, "ended") || !strings.Contains(out, "ana") {
		t.Errorf("jobs: exit %d, %q", code, out)
	}

	if code, out, _ := runCLI(t, sock, "spawn", "--thread", "t1", "--", "sleep 300"); code != 0 || out != "bash-2\n" {
		t.Fatalf("spawn: exit %d, %q", code, out)
	}
	if code, out, _ := runCLI(t, sock, "jobs", "--thread", "t1"); !strings.Contains(out, "running") {
		t.Errorf("jobs with one running: exit %d, %q", code, out)
	}
	start := time.Now()
	if code, out, errOut := runCLI(t, sock, "kill", "--thread", "t1", "bash-2"); code != 0 || out != "bash-2 ended (exit 143)\n" {
		t.Errorf("kill: exit %d, %q, %q after %v", code, out, errOut, time.Since(start))
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"logs", "--thread", "t1"}, 2, "give one job id"},
		{[]string{"logs", "--thread", "t1", "bash-9"}, 1, "no job bash-9"},
		{[]string{"kill", "--thread", "t1", "job-1"}, 1, "not a job id"},
		{[]string{"spawn", "--thread", "t1"}, 2, "no command given"},
	} {
		if code, _, errOut := runCLI(t, sock, c.args...); code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%q: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.err)
		}
	}
}

func TestShellCommand(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"make && make test"}, "make && make test"},
		{[]string{"git", "status"}, "git status"},
		{[]string{"go", "test", "./...", "-run=TestX"}, "go test ./... -run=TestX"},
		{[]string{"echo", "it's"}, `echo 'it'\''s'`},
		{[]string{"A=1", "env"}, "'A=1' env"},
		{[]string{"ls", ""}, "ls ''"},
		{[]string{"ls", "*.go"}, "ls '*.go'"},
	} {
		if got := shellCommand(c.argv); got != c.want {
			t.Errorf("shellCommand(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}

// TestKillSignal: kill --signal sends one signal to a job's tree and
// says so; KILL ends it at once and says how; bad signals and --grace
// with --signal are refused.
func TestKillSignal(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	if code, out, errOut := runCLI(t, sock, "spawn", "--thread", "t1", "--", `trap 'echo got usr1' USR1; echo up; while :; do sleep 0.05; done`); code != 0 || out != "bash-1\n" {
		t.Fatalf("spawn: exit %d, %q, %q", code, out, errOut)
	}
	waitLogs := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, out, _ := runCLI(t, sock, "logs", "--thread", "t1", "bash-1")
			if strings.Contains(out, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the job never wrote %q: %q", want, out)
			}
		}
	}
	waitLogs("up\n")
	if code, out, errOut := runCLI(t, sock, "kill", "--signal", "usr1", "--thread", "t1", "bash-1"); code != 0 || out != "bash-1: SIGUSR1 sent\n" {
		t.Errorf("kill --signal usr1: exit %d, %q, %q", code, out, errOut)
	}
	waitLogs("got usr1\n")
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"kill", "--signal", "FOO", "--thread", "t1", "bash-1"}, 1, "unknown signal"},
		{[]string{"kill", "--signal", "0", "--thread", "t1", "bash-1"}, 1, "signal 0"},
		{[]string{"kill", "--signal", "TERM", "--grace", "1", "--thread", "t1", "bash-1"}, 2, "not both"},
		{[]string{"kill", "--signal", "TERM", "--thread", "t1", "bash-7"}, 1, "no job bash-7"},
	} {
		if code, _, errOut := runCLI(t, sock, c.args...); code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%q: exit %d, %q; want %d, %q", c.args, code, errOut, c.code, c.err)
		}
	}
	if code, out, errOut := runCLI(t, sock, "kill", "--signal", "KILL", "--thread", "t1", "bash-1"); code != 0 || out != "bash-1 ended (exit 137)\n" {
		t.Errorf("kill --signal KILL: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, sock, "kill", "--signal", "TERM", "--thread", "t1", "bash-1"); code != 1 || !strings.Contains(errOut, "has ended") {
		t.Errorf("kill --signal of an ended job: exit %d, %q", code, errOut)
	}
	if _, out, _ := runCLI(t, sock, "jobs", "--thread", "t1"); !strings.Contains(out, "killed by SIGKILL at the client's request") {
		t.Errorf("jobs after kill --signal KILL: %q", out)
	}
}

// TestLogsOneStream: logs --stream reads stdout or stderr alone, as the
// API does; another name is a usage error.
func TestLogsOneStream(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	if code, out, errOut := runCLI(t, sock, "spawn", "--thread", "t1", "--", "echo out; echo err >&2; echo out2"); code != 0 || out != "bash-1\n" {
		t.Fatalf("spawn: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, sock, "logs", "-f", "--thread", "t1", "bash-1"); code != 0 {
		t.Fatalf("logs -f: exit %d, %q", code, errOut)
	}
	for stream, want := range map[string]string{"stdout": "out\nout2\n", "stderr": "err\n"} {
		if code, out, errOut := runCLI(t, sock, "logs", "--stream", stream, "--thread", "t1", "bash-1"); code != 0 || out != want {
			t.Errorf("logs --stream %s: exit %d, %q, %q; want %q", stream, code, out, errOut, want)
		}
	}
	if code, _, errOut := runCLI(t, sock, "logs", "--stream", "all-of-it", "--thread", "t1", "bash-1"); code != 2 || !strings.Contains(errOut, "want stdout or stderr") {
		t.Errorf("logs --stream all-of-it: exit %d, %q; want a usage error", code, errOut)
	}
}
