package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// execDaemonEnv makes the test binary act as `warren serve`, as if it were
// the program at the variable's value (see TestMain).
const execDaemonEnv = "WARREN_TEST_EXEC_DAEMON_AS"

// TestServeExecsDaemon: `warren serve ARGS` becomes warrend (beside the
// program, else on PATH) in the same process with the same arguments, and
// says what to do when there is none.
func TestServeExecsDaemon(t *testing.T) {
	// A stand-in daemon that prints its pid and its arguments.
	fake := func(dir string) string {
		p := filepath.Join(dir, daemonName)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho \"$$ $0 $*\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	besideDir, pathDir, emptyDir := t.TempDir(), t.TempDir(), t.TempDir()
	beside, onPath := fake(besideDir), fake(pathDir)
	args := []string{"--data", "/srv/w d", "--log-level", "debug"}
	for _, c := range []struct {
		name, self, path string
		want             string // the daemon that ran; "" for none
	}{
		{"beside", filepath.Join(besideDir, "warren"), pathDir, beside},
		{"on PATH", filepath.Join(emptyDir, "warren"), pathDir, onPath},
		{"none", filepath.Join(emptyDir, "warren"), emptyDir, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), execDaemonEnv+"="+c.self, "PATH="+c.path)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			if c.want == "" {
				if err == nil || !strings.Contains(errOut.String(), "there is none beside "+c.self+" nor on PATH") {
					t.Errorf("got %v, stdout %q, stderr %q; want a failure that says no %s was found", err, out.String(), errOut.String(), daemonName)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: stderr %q", err, errOut.String())
			}
			want := strconv.Itoa(cmd.Process.Pid) + " " + c.want + " serve " + strings.Join(args, " ") + "\n"
			if out.String() != want {
				t.Errorf("the daemon said %q, want %q (same pid, same arguments)", out.String(), want)
			}
		})
	}
}
