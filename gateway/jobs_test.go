package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/gateway/jobs"
	"warren/meta"
)

// jobCtx bounds a job test.
func jobCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// readJob reads a job's whole output as it stands (or, with follow, to its
// end) and returns the data, the offset it starts at, what was dropped
// before it, and the exit code if the end was seen.
func readJob(t *testing.T, c *client.Client, thread, id string, follow bool) (data string, start, dropped int64, exit *int) {
	t.Helper()
	var buf strings.Builder
	first := true
	err := c.JobOutput(jobCtx(t), "acme", thread, id, 0, follow, func(f api.JobFrame) error {
		if f.Data != "" {
			if first {
				start, dropped, first = f.Offset, f.Dropped, false
			} else if f.Dropped != 0 {
				return fmt.Errorf("a reader that keeps up lost %d bytes at %d", f.Dropped, f.Offset)
			}
			buf.WriteString(f.Data)
		}
		if f.End {
			exit = f.Exit
		}
		return nil
	})
	if err != nil {
		t.Fatalf("output of %s: %v", id, err)
	}
	return buf.String(), start, dropped, exit
}

// waitJobEnd waits until job id of thread ended and returns it.
func waitJobEnd(t *testing.T, c *client.Client, thread, id string) api.JobInfo {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := c.Job(jobCtx(t), "acme", thread, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Ended && info.ExitCode != nil {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not end: %+v", id, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJobBasics: spawn answers at once with bash-N, the job runs in the
// thread's jail with its env and cwd, its output and end are kept and
// recorded, input reaches it, and bad requests are refused.
func TestJobBasics(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)

	start := time.Now()
	j1, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `echo "$WHO in $(pwd)"; read line; echo "got $line"; exit 3`,
		Cwd: "sub/..", Env: map[string]string{"WHO": "job"}, User: "ana", Label: "greeter"})
	if err != nil {
		t.Fatal(err)
	}
	if j1.ID != "bash-1" || !j1.Running || j1.Label != "greeter" || j1.User != "ana" || j1.BackendID == "" || time.Since(start) > 5*time.Second {
		t.Fatalf("spawned: %+v after %v", j1, time.Since(start))
	}
	if err := c.JobStdin(ctx, "acme", "t1", "bash-1", "hello\n", true); err != nil {
		t.Fatal(err)
	}
	info := waitJobEnd(t, c, "t1", "bash-1")
	if *info.ExitCode != 3 || info.EndedAt.IsZero() || info.StartedAt.IsZero() {
		t.Errorf("ended job: %+v", info)
	}
	out, startOff, dropped, exit := readJob(t, c, "t1", "bash-1", false)
	if out != "job in /workspace\ngot hello\n" || startOff != 0 || dropped != 0 || exit == nil || *exit != 3 {
		t.Errorf("output %q from %d (dropped %d), exit %v", out, startOff, dropped, exit)
	}

	j2, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "true"})
	if err != nil || j2.ID != "bash-2" || j2.Label != "true" {
		t.Fatalf("second job: %+v, %v", j2, err)
	}
	waitJobEnd(t, c, "t1", "bash-2")
	jobs, err := c.Jobs(ctx, "acme", "t1")
	if err != nil || len(jobs) != 2 || jobs[0].ID != "bash-1" || jobs[1].ID != "bash-2" || jobs[0].Running {
		t.Errorf("jobs: %+v, %v", jobs, err)
	}
	// Another thread counts its own jobs.
	if j, err := c.Spawn(ctx, "acme", "t2", api.SpawnRequest{Command: "true"}); err != nil || j.ID != "bash-1" {
		t.Errorf("first job of another thread: %+v, %v", j, err)
	}

	for _, bad := range []api.SpawnRequest{{}, {Command: "true", Cwd: "../.."}, {Command: "true", Env: map[string]string{"AGENT": "0"}}} {
		if _, err := c.Spawn(ctx, "acme", "t1", bad); err == nil {
			t.Errorf("spawn %+v: no error", bad)
		}
	}
	if _, err := c.Job(ctx, "acme", "t1", "bash-9"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a job that never was: %v", err)
	}
	if _, err := c.Job(ctx, "acme", "t1", "bash-01"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a malformed job id: %v", err)
	}
	if err := c.JobOutput(ctx, "acme", "t1", "bash-1", 1<<40, false, func(api.JobFrame) error { return nil }); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("an offset past the end: %v", err)
	}
}

// TestJobLimit: the ninth job is refused with the limit named, the eight
// go on unaffected; a running exec moved to the background at the limit
// is refused and stays in the foreground; below it, it moves and counts.
func TestJobLimit(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	for i := 1; i <= 8; i++ {
		if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: fmt.Sprintf("echo job %d; exec sleep 300", i)}); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	_, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "echo ninth"})
	var apiErr *api.APIError
	const limitMsg = "This thread already runs 8 background jobs, its limit (maxJobs). Wait for one to end, or stop one, before you start another."
	if !errors.Is(err, api.ErrJobLimit) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || apiErr.Message != limitMsg {
		t.Fatalf("ninth job: %v", err)
	}
	jobs, err := c.Jobs(ctx, "acme", "t1")
	if err != nil || len(jobs) != 8 {
		t.Fatalf("jobs after the refusal: %d, %v", len(jobs), err)
	}
	for _, j := range jobs {
		if !j.Running {
			t.Errorf("job %s after the refusal: not running", j.ID)
		}
		waitLine(t, c, "t1", j.ID, fmt.Sprintf("job %d\n", j.Seq))
	}

	// An exec at the limit does not move.
	ids := make(chan string, 1)
	type result struct {
		code int
		err  error
		out  string
	}
	done := make(chan result, 1)
	go func() {
		var out bytes.Buffer
		code, err := c.ExecStream(ctx, "acme", "t1", api.ExecRequest{Command: "echo fg; sleep 1; echo still fg"},
			func(id string) { ids <- id }, &out, nil)
		done <- result{code, err, out.String()}
	}()
	id := <-ids
	if _, err := c.Background(ctx, "acme", "t1", id, api.BackgroundRequest{User: "ana"}); !errors.Is(err, api.ErrJobLimit) || !errors.As(err, &apiErr) || apiErr.Message != limitMsg {
		t.Fatalf("moving an exec at the limit: %v", err)
	}
	if r := <-done; r.err != nil || r.code != 0 || r.out != "fg\nstill fg\n" {
		t.Fatalf("the exec refused a move: exit %d, %v, %q", r.code, r.err, r.out)
	}

	// Below the limit it moves, and counts.
	if info, err := c.StopJob(ctx, "acme", "t1", "bash-1", time.Second); err != nil || info.Running || info.ExitCode == nil {
		t.Fatalf("stop: %+v, %v", info, err)
	}
	go func() {
		var out bytes.Buffer
		code, err := c.ExecStream(ctx, "acme", "t1", api.ExecRequest{Command: "echo before; sleep 0.5; echo after; exit 5", OpenStdin: true},
			func(id string) { ids <- id }, &out, nil)
		done <- result{code, err, out.String()}
	}()
	id = <-ids
	moved, err := c.Background(ctx, "acme", "t1", id, api.BackgroundRequest{User: "bo"})
	if err != nil || moved.ID != "bash-9" || moved.User != "bo" || !moved.Running {
		t.Fatalf("move: %+v, %v", moved, err)
	}
	r := <-done
	var mv *api.MovedError
	if !errors.As(r.err, &mv) || mv.Job != "bash-9" {
		t.Errorf("the moved exec's answer: exit %d, %v", r.code, r.err)
	}
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "true"}); !errors.Is(err, api.ErrJobLimit) {
		t.Errorf("a job while the moved exec fills the limit: %v", err)
	}
	info := waitJobEnd(t, c, "t1", "bash-9")
	out, _, _, _ := readJob(t, c, "t1", "bash-9", false)
	// "before" went to the exec's client or, if the move came first, to
	// the job; "after" to the job.
	if *info.ExitCode != 5 || r.out+out != "before\nafter\n" || !strings.HasSuffix(out, "after\n") {
		t.Errorf("moved job: exit %d; exec got %q, job got %q", *info.ExitCode, r.out, out)
	}
}

// TestJobOutputKept: of a 50 MiB output the job keeps exactly the newest
// 1 MiB, and says how much it dropped.
func TestJobOutputKept(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	// 3276800 lines of 16 bytes: 50 MiB, every line different.
	const lines, width = 3276800, 16
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: fmt.Sprintf("seq -f %%015.0f 0 %d", lines-1)}); err != nil {
		t.Fatal(err)
	}
	info := waitJobEnd(t, c, "t1", "bash-1")
	const total, kept = lines * width, 1 << 20
	if info.OutputBytes != total || info.DroppedBytes != total-kept {
		t.Errorf("sizes: %d written, %d dropped; want %d, %d", info.OutputBytes, info.DroppedBytes, total, total-kept)
	}
	out, start, dropped, exit := readJob(t, c, "t1", "bash-1", false)
	var want strings.Builder
	for i := (total - kept) / width; i < lines; i++ {
		fmt.Fprintf(&want, "%015d\n", i)
	}
	if start != total-kept || dropped != total-kept || exit == nil || *exit != 0 || out != want.String() {
		t.Errorf("kept output: %d bytes from %d (dropped %d), exit %v; equal to the newest 1 MiB: %v",
			len(out), start, dropped, exit, out == want.String())
	}
}

// TestJobFollowers: two clients follow a job's output while it writes as
// fast as it can and a third one stalls: the job runs to its end anyway,
// each follower gets every byte it did not lose at its true offset, and
// is told exactly how many it lost.
func TestJobFollowers(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	const total = 64 << 20
	// Each 16-byte line holds its own offset; cat writes them as fast as
	// it can.
	lines := make([]byte, 0, total)
	for off := 0; off < total; off += 16 {
		lines = offsetLine(lines, int64(off))
	}
	bound, err := c.Bind(ctx, "acme", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bound.MountPath, "lines"), lines, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 0.3; cat lines"}); err != nil {
		t.Fatal(err)
	}
	// The stalled reader asks to follow and never reads.
	stalled := unixHTTP(env.g.SocketPath())
	defer stalled.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://warren/v1/tenants/acme/threads/t1/jobs/bash-1/output?follow=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stalled.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stalled reader got status %s", resp.Status)
	}

	var wg sync.WaitGroup
	for f := range 2 {
		wg.Go(func() {
			var got, lost int64
			next := int64(0)
			var carry []byte
			err := c.JobOutput(ctx, "acme", "t1", "bash-1", 0, true, func(fr api.JobFrame) error {
				if fr.Data == "" {
					return nil
				}
				if fr.Offset != next+fr.Dropped {
					return fmt.Errorf("frame at %d after %d with %d dropped", fr.Offset, next, fr.Dropped)
				}
				if fr.Dropped > 0 {
					carry = nil
				}
				lost += fr.Dropped
				got += int64(len(fr.Data))
				// Whole lines must read as their own offsets.
				b := append(carry, fr.Data...)
				lineStart := fr.Offset - int64(len(carry))
				if skip := (16 - lineStart%16) % 16; skip > 0 { // a drop cut a line
					b, lineStart = b[min(int64(len(b)), skip):], lineStart+skip
				}
				var want [16]byte
				for len(b) >= 16 {
					if !bytes.Equal(b[:16], offsetLine(want[:0], lineStart)) {
						return fmt.Errorf("follower %d: %q at offset %d", f, b[:16], lineStart)
					}
					b, lineStart = b[16:], lineStart+16
				}
				carry = append([]byte(nil), b...)
				next = fr.Offset + int64(len(fr.Data))
				return nil
			})
			if err != nil {
				t.Errorf("follower %d: %v", f, err)
			}
			if got+lost != total {
				t.Errorf("follower %d: got %d + lost %d bytes, want %d", f, got, lost, total)
			}
			t.Logf("follower %d: got %d bytes, lost %d", f, got, lost)
		})
	}
	start := time.Now()
	wg.Wait()
	info := waitJobEnd(t, c, "t1", "bash-1")
	t.Logf("64 MiB job ended after %v with a stalled reader", time.Since(start))
	if info.OutputBytes != total || *info.ExitCode != 0 {
		t.Errorf("job with a stalled reader: %+v", info)
	}
}

// offsetLine appends off as a 16-byte line: 15 digits and a newline.
func offsetLine(b []byte, off int64) []byte {
	var d [16]byte
	d[15] = '\n'
	for i := 14; i >= 0; i-- {
		d[i] = byte('0' + off%10)
		off /= 10
	}
	return append(b, d[:]...)
}

// TestJobStopTree: stopping a job asks its whole tree to end (a trap sees
// SIGTERM) and kills what does not; a daemon it started, which left its
// session, is gone too.
func TestJobStopTree(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `setsid sh -c 'trap "" TERM; exec sleep 314' </dev/null >/dev/null 2>&1 &
trap 'echo bye; exit 0' TERM; echo up; while :; do sleep 0.05; done`}); err != nil {
		t.Fatal(err)
	}
	waitLine(t, c, "t1", "bash-1", "up\n")
	waitHost(t, "exec sleep 314", 1) // the daemon's shell, which set its trap
	start := time.Now()
	info, err := c.StopJob(ctx, "acme", "t1", "bash-1", 2*time.Second)
	if err != nil || info.Running || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("stop: %+v, %v", info, err)
	}
	// The loop's sleep gets SIGTERM too (bash says "Terminated").
	if out, _, _, _ := readJob(t, c, "t1", "bash-1", false); !strings.HasPrefix(out, "up\n") || !strings.HasSuffix(out, "bye\n") {
		t.Errorf("output of a stopped job: %q", out)
	}
	waitHost(t, "sleep 314", 0)
	t.Logf("stopped in %v", time.Since(start))

	// A job that ignores SIGTERM is killed after the grace.
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `trap '' TERM; echo up; exec sleep 315`}); err != nil {
		t.Fatal(err)
	}
	waitLine(t, c, "t1", "bash-2", "up\n")
	start = time.Now()
	info, err = c.StopJob(ctx, "acme", "t1", "bash-2", 300*time.Millisecond)
	if err != nil || *info.ExitCode != 137 || time.Since(start) < 250*time.Millisecond {
		t.Errorf("stop of a job that ignores SIGTERM: %+v, %v after %v", info, err, time.Since(start))
	}
	waitHost(t, "sleep 315", 0)
	// Stopping an ended job answers with it.
	if info, err := c.StopJob(ctx, "acme", "t1", "bash-2", 0); err != nil || *info.ExitCode != 137 {
		t.Errorf("stop again: %+v, %v", info, err)
	}
}

// waitLine waits until a job's output is want.
func waitLine(t *testing.T, c *client.Client, thread, id, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if out, _, _, _ := readJob(t, c, thread, id, false); out == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never wrote %q", id, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitHost waits until n host processes match marker.
func waitHost(t *testing.T, marker string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, _ := exec.Command("pgrep", "-f", marker).Output()
		if len(strings.Fields(string(out))) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: processes %q, want %d", marker, out, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJobRestart: job ids never repeat across a restart of the gateway,
// and a job that a former run of this host left running (it crashed) is
// noted stopped exactly once.
func TestJobRestart(t *testing.T) {
	store := newStore(t)
	cfg := Config{Store: store, DataDir: t.TempDir() + "/data", HostID: "host-a"}
	env := startEnv(t, cfg)
	ctx := jobCtx(t)
	for range 2 {
		if _, err := env.c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 300"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean stop records the jobs' ends itself: killed with their jail,
	// with a note that says so.
	recs, _ := store.ListJobs(ctx, meta.ThreadKey{Tenant: "acme", Thread: "t1"})
	for _, r := range recs {
		if r.Running || r.ExitCode == nil || *r.ExitCode != jobs.KilledExit || r.Note != jobs.KilledNote(jobs.ID(r.Seq), "the daemon stopped") ||
			r.Reason != api.ReasonReclaimed {
			t.Errorf("job after a clean stop: %+v", r)
		}
	}
	// What a crash leaves: a job recorded running by a former run.
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	seq, err := store.NextJobSeq(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateJob(ctx, meta.Job{ThreadKey: k, Seq: seq, Label: "npm run dev", HostID: "host-a",
		Instance: "crashed", BackendID: "4242", StartedAt: time.Now(), Running: true}); err != nil {
		t.Fatal(err)
	}
	// And one of another host, which this host must not touch.
	other, _ := store.NextJobSeq(ctx, k)
	store.CreateJob(ctx, meta.Job{ThreadKey: k, Seq: other, Label: "elsewhere", HostID: "host-b", Instance: "x", StartedAt: time.Now(), Running: true})

	for run := range 2 {
		env := startEnv(t, cfg)
		info, err := env.c.Job(ctx, "acme", "t1", jobs.ID(seq))
		want := fmt.Sprintf("Background job bash-%d stopped when the host restarted.", seq)
		if err != nil || info.Running || !info.Ended || info.Note != want || info.ExitCode == nil || *info.ExitCode != jobs.KilledExit {
			t.Errorf("run %d: the crashed run's job: %+v, %v", run, info, err)
		}
		if info, _ := env.c.Job(ctx, "acme", "t1", jobs.ID(other)); info.Ended || info.Running || info.Note != "" {
			t.Errorf("run %d: another host's job: %+v", run, info)
		}
		notes := strings.Count(env.logBuf.String(), "job stopped by a restart")
		if (run == 0) != (notes == 1) || notes > 1 {
			t.Errorf("run %d: %d restart notes", run, notes)
		}
		j, err := env.c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "true"})
		if wantID := jobs.ID(other + 1 + uint64(run)); err != nil || j.ID != wantID {
			t.Errorf("run %d: new job %+v, %v; want %s", run, j, err, wantID)
		}
		waitJobEnd(t, env.c, "t1", j.ID)
		if err := env.g.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJobEvents: a thread's job events arrive in order: started, the
// output in order, ended with the exit code and the user.
func TestJobEvents(t *testing.T) {
	env := startEnv(t, Config{})
	c := env.c
	ctx, cancel := context.WithCancel(jobCtx(t))
	defer cancel()
	evs := make(chan api.Event, 4096)
	go c.Events(ctx, "acme", "t1", func(ev api.Event) error { evs <- ev; return nil })
	// The stream may not be subscribed yet: bind until its event shows.
	for subscribed := false; !subscribed; {
		c.CloseThread(ctx, "acme", "t1")
		c.Bind(ctx, "acme", "t1")
		select {
		case <-evs:
			subscribed = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	for len(evs) > 0 {
		<-evs
	}
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `for i in $(seq 1 300); do echo line $i; done; exit 7`, User: "ana"}); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	var got strings.Builder
	var seq uint64
	for state := "started"; state != "done"; {
		var ev api.Event
		select {
		case ev = <-evs:
		case <-time.After(30 * time.Second):
			t.Fatalf("no event after %q", got.String())
		}
		if ev.Seq <= seq || ev.Job != "bash-1" {
			t.Fatalf("event out of order or not the job's: %+v after seq %d", ev, seq)
		}
		seq = ev.Seq
		switch {
		case state == "started" && ev.Type == api.EventJobStarted && ev.User == "ana":
			state = "output"
		case state == "output" && ev.Type == api.EventJobOutput:
			got.WriteString(ev.Data)
		case state == "output" && ev.Type == api.EventJobEnded && ev.Exit != nil && *ev.Exit == 7 && ev.User == "ana":
			state = "done"
		default:
			t.Fatalf("event %+v in state %s", ev, state)
		}
	}
	if got.String() != want.String() {
		t.Errorf("output events: %q", got.String())
	}
}

// TestCloseWithJobs: closing a thread whose jobs run keeps its jail and
// mount for them, and takes them down once the last one ends; a bind in
// between keeps them for good.
func TestCloseWithJobs(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	mounted := func(thread string) (meta.State, bool) {
		ti, err := c.Thread(ctx, "acme", thread)
		if err != nil {
			t.Fatal(err)
		}
		return ti.State, ti.Mounted
	}
	if _, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "echo started; sleep 1; echo done"}); err != nil {
		t.Fatal(err)
	}
	waitLine(t, c, "t1", "bash-1", "started\n")
	if _, err := c.CloseThread(ctx, "acme", "t1"); err != nil {
		t.Fatal(err)
	}
	if state, m := mounted("t1"); state != meta.StateClosed || !m {
		t.Errorf("closed with a job running: %s, mounted %v; want closed and still mounted", state, m)
	}
	info := waitJobEnd(t, c, "t1", "bash-1")
	if *info.ExitCode != 0 {
		t.Errorf("the job of a closed thread: exit %d", *info.ExitCode)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, m := mounted("t1"); !m {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still mounted after its last job ended")
		}
	}

	// Bound again while its job runs: it stays up after the job.
	if _, err := c.Spawn(ctx, "acme", "t2", api.SpawnRequest{Command: "sleep 0.5"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseThread(ctx, "acme", "t2"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, err := c.Exec(ctx, "acme", "t2", api.ExecRequest{Command: "echo back"}, &out, nil); err != nil || code != 0 || out.String() != "back\n" {
		t.Fatalf("exec on a closed thread: %d, %v, %q", code, err, out.String())
	}
	waitJobEnd(t, c, "t2", "bash-1")
	time.Sleep(200 * time.Millisecond)
	if state, m := mounted("t2"); state != meta.StateBound || !m {
		t.Errorf("bound again, after its job: %s, mounted %v", state, m)
	}
}
