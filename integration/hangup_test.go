package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"warren/gateway"
)

// cpuLoad keeps n busy loops running until the test ends: a loaded machine
// is where the scheduler lets a hang-up land in the middle of a start. The
// loops are ended by pid.
func cpuLoad(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU load: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// TestHangupEndsOnlyThatCommand: a client that hangs up right after it
// got the id of its command (with open stdin, on a terminal, or after the
// first output of a plain command), round after round on a loaded
// machine. Each hang-up ends that command only: the thread's job runs on,
// and the next command of the thread works.
func TestHangupEndsOnlyThatCommand(t *testing.T) {
	d := newDaemon(t)
	c := gateway.NewClient(d.socket)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	const thread = "hangup"
	job, err := c.Spawn(ctx, "", thread, gateway.SpawnRequest{Command: "sleep 600"})
	must(t, err)
	cpuLoad(t, 4)

	variants := []struct {
		name string
		req  gateway.ExecRequest
	}{
		{"openStdin", gateway.ExecRequest{Command: "cat", OpenStdin: true}},
		{"tty", gateway.ExecRequest{Command: "cat", Tty: true}},
		{"stdin+openStdin", gateway.ExecRequest{Command: "sleep 600", Stdin: "x", OpenStdin: true}},
		{"plain", gateway.ExecRequest{Command: "echo up; exec sleep 600"}},
	}
	const rounds = 25
	var hangups int
	for _, v := range variants {
		for i := range rounds {
			hctx, hangUp := context.WithCancel(ctx)
			onID := func(string) { hangUp() }
			var out bytes.Buffer
			w := &out
			if v.name == "plain" {
				// Its id rides with its first output.
				onID = nil
				w = nil
			}
			_, err := c.ExecStream(hctx, "", thread, v.req, onID, hangupWriter{w, hangUp}, nil)
			hangUp()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s round %d: the hung-up exec ended with %v, want the client's cancel", v.name, i, err)
			}
			hangups++
			var got bytes.Buffer
			code, err := c.Exec(ctx, "", thread, gateway.ExecRequest{Command: fmt.Sprintf("echo after-%d", i)}, &got, nil)
			if err != nil || code != 0 || got.String() != fmt.Sprintf("after-%d\n", i) {
				t.Fatalf("%s round %d: the next command: exit %d, %q, %v (after %d hang-ups)", v.name, i, code, got.String(), err, hangups)
			}
		}
	}
	info, err := c.Job(ctx, "", thread, job.ID)
	must(t, err)
	if !info.Running {
		t.Errorf("after %d hang-ups the job %s is not running: %+v", hangups, job.ID, info)
	}
	if logs := d.allLogs(); strings.Contains(logs, "init gone") {
		t.Errorf("the jail's init died during the hang-ups")
	}
	t.Logf("%d hang-ups (%d rounds of %d kinds) under 4 busy loops: the job ran on and every next command worked", hangups, rounds, len(variants))
}

// hangupWriter hangs up at the first output of a command (the plain
// variant's id comes with it); with a writer, it just writes.
type hangupWriter struct {
	w      *bytes.Buffer
	hangUp context.CancelFunc
}

func (h hangupWriter) Write(p []byte) (int, error) {
	if h.w != nil {
		return h.w.Write(p)
	}
	h.hangUp()
	return len(p), nil
}
