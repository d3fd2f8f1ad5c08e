package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/gateway/jobs"
	"warren/internal/testenv"
	"warren/meta"
)

// jailProcs counts the processes of thread's jail whose command line
// (its arguments joined by spaces) starts with prefix, as /proc in the
// jail shows them: the jail's own pid namespace, not the host's.
func jailProcs(t *testing.T, c *client.Client, thread, prefix string) int {
	t.Helper()
	var out bytes.Buffer
	script := `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null; echo; done`
	code, err := c.Exec(jobCtx(t), "acme", thread, api.ExecRequest{Command: script}, &out, nil)
	if err != nil || code != 0 {
		t.Fatalf("list the jail's processes: exit %d, %v", code, err)
	}
	n := 0
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// waitJailProcs waits until thread's jail has n processes whose command
// line starts with prefix.
func waitJailProcs(t *testing.T, c *client.Client, thread, prefix string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := jailProcs(t, c, thread, prefix)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the jail has %d processes %q, want %d", got, prefix, n)
		}
	}
}

// waitOutput waits until job id's output holds want.
func waitOutput(t *testing.T, c *client.Client, thread, id, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if out, _, _, _ := readJob(t, c, thread, id, false); strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			out, _, _, _ := readJob(t, c, thread, id, false)
			t.Fatalf("%s never wrote %q; its output: %q", id, want, out)
		}
	}
}

// TestSignalJob: a signal reaches the job, in every spelling; SIGTERM
// reaches its whole tree in the jail, a grandchild that left its session
// too, and ends it; SIGKILL ends it at once, recorded with 137 and a note;
// a job that ended, ran on another host or never was is refused, and so
// are signals that are not signals.
func TestSignalJob(t *testing.T) {
	store := newStore(t)
	env := startEnv(t, Config{Store: store})
	c, ctx := env.c, jobCtx(t)

	// A trap sees each signal, however it was named.
	j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `n=0; trap 'n=$((n+1)); echo "got usr1 $n"' USR1; echo ready; while :; do sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, c, "t1", j.ID, "ready\n")
	for i, name := range []string{"SIGUSR1", "usr1", "10"} {
		got, err := c.SignalJob(ctx, "acme", "t1", j.ID, name)
		if err != nil || got.Signal != "SIGUSR1" || got.Job.ID != j.ID || !got.Job.Running {
			t.Fatalf("signal %q: %+v, %v", name, got, err)
		}
		waitOutput(t, c, "t1", j.ID, fmt.Sprintf("got usr1 %d\n", i+1))
	}
	// SIGKILL ends it at once: the answer has its end.
	got, err := c.SignalJob(ctx, "acme", "t1", j.ID, "KILL")
	if err != nil || got.Signal != "SIGKILL" || got.Job.Running || !got.Job.Ended || got.Job.ExitCode == nil ||
		*got.Job.ExitCode != jobs.KilledExit || got.Job.Note != jobs.ClientKillNote(j.ID) {
		t.Fatalf("SIGKILL: %+v, %v", got, err)
	}
	if info, err := c.Job(ctx, "acme", "t1", j.ID); err != nil || *info.ExitCode != jobs.KilledExit || info.Note != jobs.ClientKillNote(j.ID) {
		t.Errorf("the killed job as listed: %+v, %v", info, err)
	}
	// An ended job has nothing to signal.
	var apiErr *api.APIError
	if _, err := c.SignalJob(ctx, "acme", "t1", j.ID, "TERM"); !errors.Is(err, api.ErrConflict) || !errors.As(err, &apiErr) ||
		apiErr.Status != http.StatusConflict || !strings.Contains(apiErr.Message, "has ended (exit 137)") {
		t.Errorf("a signal to an ended job: %v", err)
	}

	// SIGTERM to a job waiting for a background child ends both.
	j, err = c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `sleep 1000 & wait`})
	if err != nil {
		t.Fatal(err)
	}
	waitJailProcs(t, c, "t1", "sleep 1000 ", 1)
	if got, err := c.SignalJob(ctx, "acme", "t1", j.ID, "SIGTERM"); err != nil || got.Signal != "SIGTERM" {
		t.Fatalf("SIGTERM: %+v, %v", got, err)
	}
	if info := waitJobEnd(t, c, "t1", j.ID); *info.ExitCode != 128+int(syscall.SIGTERM) ||
		info.Reason != api.ReasonKilled || info.Note != "killed: SIGTERM sent by the client" {
		t.Errorf("the job after SIGTERM: %+v", info)
	}
	if n := jailProcs(t, c, "t1", "sleep 1000 "); n != 0 {
		t.Errorf("%d sleep 1000 left in the jail after SIGTERM to its job", n)
	}

	// The signal reaches the children while the job itself lives on: one
	// in the job's session and one that left it.
	j, err = c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `sleep 1001 & setsid sleep 1002 & trap 'echo main got TERM' TERM; echo up; while :; do sleep 0.05; done`})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, c, "t1", j.ID, "up\n")
	waitJailProcs(t, c, "t1", "sleep 100", 2)
	if _, err := c.SignalJob(ctx, "acme", "t1", j.ID, "term"); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, c, "t1", j.ID, "main got TERM\n")
	waitJailProcs(t, c, "t1", "sleep 100", 0)
	if info, err := c.Job(ctx, "acme", "t1", j.ID); err != nil || !info.Running {
		t.Errorf("the job that trapped SIGTERM: %+v, %v", info, err)
	}
	if _, err := c.SignalJob(ctx, "acme", "t1", j.ID, "9"); err != nil {
		t.Fatal(err)
	}

	// Refusals: not a signal, a job that never was, one of another host.
	for _, bad := range []string{"", "0", "65", "SIGFOO", "-9"} {
		if _, err := c.SignalJob(ctx, "acme", "t1", "bash-1", bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("signal %q: %v, want invalid", bad, err)
		}
	}
	for _, body := range []string{`{"signal":0}`, `{"signal":true}`, `{"signal":"INT","grace":1}`, `{}`, `{"signal":2.5}`} {
		resp := rawRequest(t, env.g.SocketPath(), http.MethodPost, "/v1/tenants/acme/threads/t1/jobs/bash-1/signal", []byte(body))
		if resp.status != http.StatusBadRequest || resp.apiError(t).Code != api.CodeInvalid {
			t.Errorf("body %s: %d %s, want 400 invalid", body, resp.status, resp.body)
		}
	}
	if resp := rawRequest(t, env.g.SocketPath(), http.MethodPost, "/v1/tenants/acme/threads/t1/jobs/bash-1/signal", []byte(`{"signal":2}`)); resp.status != http.StatusConflict {
		t.Errorf("signal 2 as a JSON number to an ended job: %d %s, want 409", resp.status, resp.body)
	}
	if _, err := c.SignalJob(ctx, "acme", "t1", "bash-99", "TERM"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a job that never was: %v, want not found", err)
	}
	if _, err := c.SignalJob(ctx, "acme", "t1", "job-1", "TERM"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a malformed job id: %v, want invalid", err)
	}
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	seq, err := store.NextJobSeq(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateJob(ctx, meta.Job{ThreadKey: k, Seq: seq, Label: "elsewhere", HostID: "host-b", Instance: "x", StartedAt: time.Now(), Running: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SignalJob(ctx, "acme", "t1", jobs.ID(seq), "TERM"); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "host-b") {
		t.Errorf("a job of another host: %v, want a conflict that names it", err)
	}
}

// TestSignalExec: SIGINT ends a running command with 130; a command
// that ended, that became a job, of another thread or that never was is
// refused.
func TestSignalExec(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)

	// start runs command in the background of the test and returns its id
	// (a command that says nothing gets it within execIDDelay) once its
	// output holds ready, and its result.
	type result struct {
		code int
		err  error
		out  string
	}
	start := func(thread string, req api.ExecRequest, ready string) (string, <-chan result) {
		ids := make(chan string, 1)
		done := make(chan result, 1)
		var out testenv.SyncBuffer
		go func() {
			code, err := c.ExecStream(ctx, "acme", thread, req, func(id string) { ids <- id }, &out, &out)
			done <- result{code, err, out.String()}
		}()
		var id string
		select {
		case id = <-ids:
		case r := <-done:
			t.Fatalf("%q ended before its id came: %+v", req.Command, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("no id for %q", req.Command)
		}
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), ready); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q never wrote %q", req.Command, ready)
			}
		}
		return id, done
	}

	begin := time.Now()
	id, done := start("t1", api.ExecRequest{Command: "sleep 100"}, "")
	t.Logf("the id of a silent command came after %v", time.Since(begin))
	got, err := c.Signal(ctx, "acme", "t1", id, "SIGINT")
	if err != nil || got.ID != id || got.Signal != "SIGINT" {
		t.Fatalf("SIGINT: %+v, %v", got, err)
	}
	if r := <-done; r.err != nil || r.code != 128+int(syscall.SIGINT) {
		t.Errorf("sleep 100 after SIGINT: exit %d, %v", r.code, r.err)
	}
	var apiErr *api.APIError
	if _, err := c.Signal(ctx, "acme", "t1", id, "INT"); !errors.Is(err, api.ErrConflict) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Errorf("a signal to an ended command: %v, want 409", err)
	}

	// A trap in the command's shell, and its child, both get it.
	id, done = start("t1", api.ExecRequest{Command: `trap 'echo got hup; exit 7' HUP; echo up; sleep 100 & wait`}, "up\n")
	if _, err := c.Signal(ctx, "acme", "t1", id, "1"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.code != 7 || r.out != "up\ngot hup\n" {
		t.Errorf("a command trapping SIGHUP: exit %d, %v, %q", r.code, r.err, r.out)
	}

	// Another thread's command is not this thread's to signal.
	id, done = start("t2", api.ExecRequest{Command: "sleep 100"}, "")
	if _, err := c.Signal(ctx, "acme", "t1", id, "INT"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a command of another thread: %v, want not found", err)
	}
	if _, err := c.Signal(ctx, "acme", "t1", "exec-99999", "INT"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a command that never was: %v, want not found", err)
	}
	if _, err := c.Signal(ctx, "acme", "t2", id, "NOSUCH"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("an unknown signal: %v, want invalid", err)
	}
	if _, err := c.Signal(ctx, "acme", "t2", id, "0"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("signal 0: %v, want invalid", err)
	}
	// SIGKILL to a command: 137.
	if _, err := c.Signal(ctx, "acme", "t2", id, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.code != 128+int(syscall.SIGKILL) {
		t.Errorf("sleep 100 after SIGKILL: exit %d, %v", r.code, r.err)
	}

	// A command moved to the background is the job's to signal now.
	id, done = start("t1", api.ExecRequest{Command: "sleep 100"}, "")
	job, err := c.Background(ctx, "acme", "t1", id, api.BackgroundRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.As(r.err, new(*api.MovedError)) {
		t.Fatalf("the moved command's answer: %+v", r)
	}
	if _, err := c.Signal(ctx, "acme", "t1", id, "INT"); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), job.ID) {
		t.Errorf("a signal to a command that became %s: %v, want a conflict that names the job", job.ID, err)
	}
	if _, err := c.SignalJob(ctx, "acme", "t1", job.ID, "INT"); err != nil {
		t.Fatal(err)
	}
	if info := waitJobEnd(t, c, "t1", job.ID); *info.ExitCode != 128+int(syscall.SIGINT) {
		t.Errorf("the moved command after SIGINT to its job: %+v", info)
	}
}

// TestSignalRace: signals sent while the command starts, runs and ends
// are each delivered or refused, never lost without an answer nor hung.
func TestSignalRace(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	for round := range 20 {
		j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 0.0" + strconv.Itoa(round%10)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_, err := c.SignalJob(ctx, "acme", "t1", j.ID, "CONT")
				if err != nil && !errors.Is(err, api.ErrConflict) {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		waitJobEnd(t, c, "t1", j.ID)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.SignalJob(cctx, "acme", "t1", "bash-1", "CONT"); !errors.Is(err, api.ErrConflict) {
		t.Errorf("after the rounds: %v", err)
	}
}
