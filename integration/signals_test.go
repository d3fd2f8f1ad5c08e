package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// TestSignalsAndStreams: through a real warren serve, a job's stdout and
// stderr are read apart, warren kill --signal sends one signal to its
// tree (its trap answers on stdout, its loop's sleep dies of it), KILL
// ends it with 137 and a note, and an exec's sleep is interrupted by
// SIGINT with 130.
func TestSignalsAndStreams(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	if id := strings.TrimSpace(d.mustWarren("spawn", "--thread", "t1", "--", `trap 'echo got usr1' USR1; echo up; echo warn >&2; while :; do sleep 0.05; done`)); id != "bash-1" {
		t.Fatalf("spawn: %q", id)
	}
	view := func(stream string) string {
		var b strings.Builder
		err := c.JobOutputStream(ctx, "", "t1", "bash-1", stream, 0, false, func(f api.JobFrame) error {
			if f.Data != "" && f.Stream != stream {
				t.Errorf("a frame of %q in the %s view", f.Stream, stream)
			}
			b.WriteString(f.Data)
			return nil
		})
		if err != nil {
			t.Fatalf("the %s of bash-1: %v", stream, err)
		}
		return b.String()
	}
	waitView := func(stream, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); view(stream) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the %s of bash-1 is %q, want %q", stream, view(stream), want)
			}
		}
	}
	waitView("stdout", "up\n")
	if got := view("stderr"); got != "warn\n" {
		t.Errorf("stderr: %q", got)
	}
	if out := d.mustWarren("kill", "--signal", "SIGUSR1", "--thread", "t1", "bash-1"); out != "bash-1: SIGUSR1 sent\n" {
		t.Errorf("kill --signal SIGUSR1: %q", out)
	}
	waitView("stdout", "up\ngot usr1\n")
	if got := view("stderr"); !strings.HasPrefix(got, "warn\n") || strings.Contains(got, "got usr1") {
		t.Errorf("stderr after SIGUSR1: %q", got)
	}
	if out := d.mustWarren("kill", "--signal", "kill", "--thread", "t1", "bash-1"); out != "bash-1 ended (exit 137)\n" {
		t.Errorf("kill --signal kill: %q", out)
	}
	if out := d.mustWarren("jobs", "--thread", "t1"); !strings.Contains(out, "Background job bash-1 was killed by SIGKILL at the client's request.") {
		t.Errorf("jobs after SIGKILL:\n%s", out)
	}
	if _, err := d.warren("kill", "--signal", "TERM", "--thread", "t1", "bash-1"); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("a signal to the ended job: %v", err)
	}

	ids := make(chan string, 1)
	done := make(chan error, 1)
	var code int
	go func() {
		var err error
		code, err = c.ExecStream(ctx, "", "t1", api.ExecRequest{Command: "sleep 100"}, func(id string) { ids <- id }, &bytes.Buffer{}, nil)
		done <- err
	}()
	id := <-ids
	if got, err := c.Signal(ctx, "", "t1", id, "INT"); err != nil || got.Signal != "SIGINT" {
		t.Fatalf("SIGINT to %s: %+v, %v", id, got, err)
	}
	if err := <-done; err != nil || code != 130 {
		t.Errorf("sleep 100 after SIGINT: exit %d, %v", code, err)
	}
	if _, err := c.Signal(ctx, "", "t1", id, "INT"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("SIGINT to the ended %s: %v", id, err)
	}
}

// TestCLIExecInterrupted: ^C (SIGINT) to `warren exec` ends the CLI as it
// ends any program, by the signal, and the daemon ends the command, whose
// answer has no reader any more. The CLI sets no handler of its own.
func TestCLIExecInterrupted(t *testing.T) {
	d := newDaemon(t)
	cmd := exec.Command(warrenBin, "exec", "--thread", "int", "--", "echo $$; exec sleep 600")
	cmd.Env = append(os.Environ(), "WARREN_SOCKET="+d.socket)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the command's pid: %v", err)
	}
	pid := strings.TrimSpace(line)
	must(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("warren exec after SIGINT: %v, want death by the signal", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Fatalf("warren exec after SIGINT: %v, want death by SIGINT", ee)
	}
	// The command's pid in the jail goes away: wait for that state.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := d.warren("exec", "--thread", "int", "--", "kill -0 "+pid+" 2>/dev/null"); err != nil {
			break // no such process any more
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %s in the jail) still runs 30 s after its CLI was interrupted", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
