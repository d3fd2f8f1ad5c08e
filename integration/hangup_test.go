package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// cpuLoad keeps n busy loops running until the returned function is
// called or the test ends: a loaded machine is where the scheduler lets a
// hang-up land in the middle of a start, or a kill between a request and
// its answer. The loops are ended by pid.
func cpuLoad(t *testing.T, n int) (stop func()) {
	t.Helper()
	var cmds []*exec.Cmd
	stop = sync.OnceFunc(func() {
		for _, cmd := range cmds {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	t.Cleanup(stop)
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a CPU load: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	return stop
}

// TestHangupEndsOnlyThatCommand: a client that hangs up right after it
// got the id of its command (with open stdin, on a terminal, or after the
// first output of a plain command), round after round on a loaded
// machine. Each hang-up ends that command only: the thread's job runs on,
// and the next command of the thread works.
func TestHangupEndsOnlyThatCommand(t *testing.T) {
	d := newDaemon(t)
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	const thread = "hangup"
	job, err := c.Spawn(ctx, "", thread, api.SpawnRequest{Command: "sleep 600"})
	must(t, err)
	cpuLoad(t, 4)

	variants := []struct {
		name string
		req  api.ExecRequest
	}{
		{"openStdin", api.ExecRequest{Command: "cat", OpenStdin: true}},
		{"tty", api.ExecRequest{Command: "cat", Tty: true}},
		{"stdin+openStdin", api.ExecRequest{Command: "sleep 600", Stdin: "x", OpenStdin: true}},
		{"plain", api.ExecRequest{Command: "echo up; exec sleep 600"}},
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
			code, err := c.Exec(ctx, "", thread, api.ExecRequest{Command: fmt.Sprintf("echo after-%d", i)}, &got, nil)
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

// waitEvent waits up to 30 s for an event of l that match accepts.
func waitEvent(t *testing.T, l *eventLog, what string, match func(api.Event) bool) api.Event {
	t.Helper()
	ev, ok := l.waitFor(30*time.Second, match)
	if !ok {
		t.Fatalf("no %s event within 30s", what)
	}
	return ev
}

// spawnFollowed spawns a job in thread and waits until the stream l told
// its start.
func spawnFollowed(t *testing.T, c *client.Client, l *eventLog, thread, command string) api.JobInfo {
	t.Helper()
	job, err := c.Spawn(context.Background(), "", thread, api.SpawnRequest{Command: command})
	must(t, err)
	waitEvent(t, l, "job.started", func(ev api.Event) bool {
		return ev.Type == api.EventJobStarted && ev.Job == job.ID
	})
	return job
}

// waitJobEnded waits until the store records the end of a job.
func waitJobEnded(t *testing.T, c *client.Client, thread, id string) api.JobInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Job(context.Background(), "", thread, id)
		must(t, err)
		if info.Ended {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s of %s not ended within 30s: %+v", id, thread, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkKilled checks that a job's record says it was killed with SIGKILL
// (137), with a note that says why.
func checkKilled(t *testing.T, how string, info api.JobInfo, why string) {
	t.Helper()
	if info.ExitCode == nil || *info.ExitCode != 137 {
		got := "none"
		if info.ExitCode != nil {
			got = fmt.Sprint(*info.ExitCode)
		}
		t.Errorf("%s: job %s recorded exit code %s, want 137 (SIGKILL)", how, info.ID, got)
	}
	if !strings.Contains(info.Note, why) {
		t.Errorf("%s: job %s has the note %q, want it to say %q", how, info.ID, info.Note, why)
	}
}

// TestJobExitWhenJailEnds: a job ended by a stop of the daemon, a crash
// of it, a delete of its thread, or the death of its jail's init records
// 137 (128 + SIGKILL, what each of them really sends it) with a note
// saying why; and after an init's death, the thread's next command gets
// a new jail, told by a jail.replaced event.
func TestJobExitWhenJailEnds(t *testing.T) {
	d := newDaemon(t, "--host-id", "host-a")
	ctx := context.Background()

	// A stop of the daemon ends its jails.
	c := d.client()
	stopped, err := c.Spawn(ctx, "", "stop", api.SpawnRequest{Command: "sleep 600"})
	must(t, err)
	d.stop()
	d.start()
	c = d.client()
	info, err := c.Job(ctx, "", "stop", stopped.ID)
	must(t, err)
	checkKilled(t, "a stop of the daemon", info, "when the daemon stopped")

	// A crash: the jail dies with its daemon.
	crashed, err := c.Spawn(ctx, "", "crash", api.SpawnRequest{Command: "sleep 600"})
	must(t, err)
	d.kill9()
	d.start()
	c = d.client()
	info, err = c.Job(ctx, "", "crash", crashed.ID)
	must(t, err)
	checkKilled(t, "kill -9 of the daemon", info, "stopped when the host restarted")

	// A delete: the record goes with the thread; the event tells.
	evs := d.subscribe("delete")
	deleted := spawnFollowed(t, c, evs, "delete", "sleep 600")
	must(t, c.DeleteThread(ctx, "", "delete"))
	ev := waitEvent(t, evs, "job.ended", func(ev api.Event) bool {
		return ev.Type == api.EventJobEnded && ev.Job == deleted.ID
	})
	if ev.Exit == nil || *ev.Exit != 137 || !strings.Contains(ev.Message, "its thread was deleted") {
		t.Errorf("a delete: job.ended %+v, want exit 137 and a note that the thread was deleted", ev)
	}

	// The jail's init dies under its jobs.
	evs = d.subscribe("died")
	victim := spawnFollowed(t, c, evs, "died", "sleep 600")
	initPid := jailOfTree(t, victim.Cgroup)
	must(t, syscall.Kill(initPid, syscall.SIGKILL))
	info = waitJobEnded(t, c, "died", victim.ID)
	checkKilled(t, "the init's death", info, "its thread's jail ended unexpectedly")
	var out bytes.Buffer
	code, err := c.Exec(ctx, "", "died", api.ExecRequest{Command: "echo alive"}, &out, nil)
	if err != nil || code != 0 || out.String() != "alive\n" {
		t.Fatalf("the command after the init's death: exit %d, %q, %v", code, out.String(), err)
	}
	waitEvent(t, evs, "jail.replaced", func(ev api.Event) bool { return ev.Type == api.EventJailReplaced })
	next, err := c.Spawn(ctx, "", "died", api.SpawnRequest{Command: "sleep 600"})
	must(t, err)
	if got := jailOfTree(t, next.Cgroup); got == initPid {
		t.Errorf("a job after the init's death runs in the dead jail %d", got)
	}
	if !strings.Contains(d.allLogs(), "jail's init died") {
		t.Errorf("the log does not tell the init's death")
	}
}

// jailOfTree reads the host pid of a jail's init from the cgroup of one
// of its commands (.../warren/jail-PID/cmd-N).
func jailOfTree(t *testing.T, cgroup string) int {
	t.Helper()
	base := filepath.Base(filepath.Dir(cgroup))
	pid, err := strconv.Atoi(strings.TrimPrefix(base, "jail-"))
	if err != nil || !strings.HasPrefix(base, "jail-") {
		t.Fatalf("the job's cgroup %q is not a command's tree of a jail", cgroup)
	}
	return pid
}
