package gateway

import (
	"bytes"
	"context"
	"testing"
	"time"

	"warren/api"
	"warren/gateway/jobs"
	"warren/meta"
)

// TestExecEndReason: a command the gateway or the kernel ended says why
// (its end's reason and note): its timeout, the OOM killer at the
// thread's memory limit, the thread's process limit. A command that
// exits 137 or 124 by itself has no reason.
func TestExecEndReason(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.c
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{MemoryBytes: 64 << 20, MaxProcs: 64}); err != nil {
		t.Fatal(err)
	}
	run := func(req api.ExecRequest) (api.ExecFrame, string) {
		t.Helper()
		var errOut bytes.Buffer
		end, err := c.ExecEnd(ctx, "acme", "t1", req, nil, nil, &errOut)
		if err != nil || end.Exit == nil {
			t.Fatalf("exec %q: %+v, %v", req.Command, end, err)
		}
		return end, errOut.String()
	}
	for _, tc := range []struct {
		name   string
		req    api.ExecRequest
		exit   int
		reason string
		note   string
	}{
		{"timeout", api.ExecRequest{Command: "sleep 5", TimeoutSeconds: 1}, jobs.TimeoutExit, api.ReasonTimeout, "timed out after 1s (the command's timeout)"},
		// 300 MB held by the shell itself, over the thread's 64 MiB.
		{"oom", api.ExecRequest{Command: `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo ${#x}`}, jobs.KilledExit, api.ReasonOOM, "killed: out of memory (the thread's limit is 64 MiB)"},
		// dash gives up at the first refused fork (bash would retry for
		// 15 seconds).
		{"pids", api.ExecRequest{Command: `sh -c 'i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait'`}, 2, api.ReasonPids, "killed: the thread's process limit (64) was reached"},
		{"exit 137", api.ExecRequest{Command: "exit 137"}, 137, "", ""},
		{"exit 124", api.ExecRequest{Command: "exit 124"}, 124, "", ""},
		{"kill -9 itself", api.ExecRequest{Command: "kill -9 $$"}, 137, "", ""},
	} {
		end, _ := run(tc.req)
		if *end.Exit != tc.exit || end.Reason != tc.reason || end.Note != tc.note {
			t.Errorf("%s: exit %d, reason %q, note %q; want %d, %q, %q", tc.name, *end.Exit, end.Reason, end.Note, tc.exit, tc.reason, tc.note)
		}
	}

	// A signal a client sent ends it: killed, and which.
	signalled := make(chan error, 1)
	end, err := c.ExecEnd(ctx, "acme", "t1", api.ExecRequest{Command: "sleep 60"}, func(id string) {
		go func() {
			_, err := c.Signal(ctx, "acme", "t1", id, "TERM")
			signalled <- err
		}()
	}, nil, nil)
	if err != nil || <-signalled != nil {
		t.Fatalf("signalled exec: %+v, %v", end, err)
	}
	if *end.Exit != 143 || end.Reason != api.ReasonKilled || end.Note != "killed: SIGTERM sent by the client" {
		t.Errorf("signalled exec: exit %d, reason %q, note %q", *end.Exit, end.Reason, end.Note)
	}
}

// TestJobEndReason: a job a client stopped says so in its record, its
// output's end and its job.ended event; one that hit the thread's memory
// limit says that; one that exits 137 by itself says nothing.
func TestJobEndReason(t *testing.T) {
	env := startEnv(t, Config{})
	c := env.c
	ctx, cancel := context.WithCancel(jobCtx(t))
	defer cancel()
	if _, err := c.BindWith(ctx, "acme", "t1", meta.Settings{MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	evs := make(chan api.Event, 4096)
	go c.Events(ctx, "acme", "t1", func(ev api.Event) error { evs <- ev; return nil })
	// The stream may not be subscribed yet: spawn until its event shows.
	for subscribed := false; !subscribed; {
		if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-evs:
			subscribed = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	ended := func(id string) api.Event {
		t.Helper()
		for {
			ev := waitEventOf(t, evs, api.EventJobEnded, "t1")
			if ev.Job == id {
				return ev
			}
		}
	}
	endFrame := func(id string) api.JobFrame {
		t.Helper()
		var last api.JobFrame
		if err := c.JobOutput(ctx, "acme", "t1", id, 0, true, func(f api.JobFrame) error { last = f; return nil }); err != nil {
			t.Fatal(err)
		}
		return last
	}

	j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	const stopNote = "killed: stopped by the client (SIGTERM)"
	if got, err := c.StopJob(ctx, "acme", "t1", j.ID, 5*time.Second); err != nil || got.Reason != api.ReasonKilled || got.Note != stopNote {
		t.Errorf("stopped job: reason %q, note %q (%v); want %q, %q", got.Reason, got.Note, err, api.ReasonKilled, stopNote)
	}
	if ev := ended(j.ID); ev.Reason != api.ReasonKilled || ev.Message != stopNote {
		t.Errorf("its job.ended: reason %q, message %q", ev.Reason, ev.Message)
	}
	if f := endFrame(j.ID); !f.End || f.Reason != api.ReasonKilled || f.Note != stopNote {
		t.Errorf("its output's end: %+v", f)
	}
	if list, err := c.Jobs(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	} else {
		for _, info := range list {
			if info.ID == j.ID && (info.Reason != api.ReasonKilled || info.Note != stopNote) {
				t.Errorf("listed: %+v", info)
			}
		}
	}

	j, err = c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `x=$(head -c 300000000 /dev/zero | tr '\0' a)`})
	if err != nil {
		t.Fatal(err)
	}
	const oomNote = "killed: out of memory (the thread's limit is 64 MiB)"
	if ev := ended(j.ID); ev.Reason != api.ReasonOOM || ev.Message != oomNote || ev.Exit == nil || *ev.Exit != jobs.KilledExit {
		t.Errorf("job out of memory: reason %q, message %q, exit %v", ev.Reason, ev.Message, ev.Exit)
	}

	j, err = c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "exit 137"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := ended(j.ID); ev.Reason != "" || ev.Message != "" || ev.Exit == nil || *ev.Exit != 137 {
		t.Errorf("job that exits 137 by itself: reason %q, message %q, exit %v", ev.Reason, ev.Message, ev.Exit)
	}
	if info, err := c.Job(ctx, "acme", "t1", j.ID); err != nil || info.Reason != "" || info.Note != "" {
		t.Errorf("its record: %+v, %v", info, err)
	}
}
