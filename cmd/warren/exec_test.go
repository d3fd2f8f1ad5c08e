package main

import (
	"os"
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
}
