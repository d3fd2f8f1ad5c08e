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
