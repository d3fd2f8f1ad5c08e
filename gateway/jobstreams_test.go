package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
)

// viewRead is what a reader of one view of a job's output got.
type viewRead struct {
	frames  []api.JobFrame // the frames with data
	by      [2]strings.Builder
	first   int64 // the offset of the first data frame
	dropped int64 // what the first frame says was dropped before it
	end     *api.JobFrame
}

// readView reads a view of a job's output from offset, following or not,
// and checks what every reader may count on: frames one after the other
// (no drop but before the first), each with data of one stream, the
// view's own in a one-stream view.
func readView(t *testing.T, c *client.Client, thread, id, stream string, offset int64, follow bool) *viewRead {
	t.Helper()
	r := &viewRead{first: -1}
	next := offset
	err := c.JobOutputStream(jobCtx(t), "acme", thread, id, stream, offset, follow, func(f api.JobFrame) error {
		if f.End {
			r.end = &f
		}
		if f.Data == "" {
			return nil
		}
		if r.first < 0 {
			r.first, r.dropped = f.Offset, f.Dropped
		} else if f.Dropped != 0 || f.Offset != next {
			return fmt.Errorf("frame at %d (dropped %d) after %d", f.Offset, f.Dropped, next)
		}
		next = f.Offset + int64(len(f.Data))
		switch {
		case f.Stream != "stdout" && f.Stream != "stderr":
			return fmt.Errorf("a frame at %d of stream %q", f.Offset, f.Stream)
		case stream != "" && stream != api.JobStreamAll && f.Stream != stream:
			return fmt.Errorf("a frame of %s in the %s view", f.Stream, stream)
		}
		s := 0 // by[0] is stdout, by[1] stderr
		if f.Stream == "stderr" {
			s = 1
		}
		r.by[s].WriteString(f.Data)
		r.frames = append(r.frames, f)
		return nil
	})
	if err != nil {
		t.Fatalf("%s of %s from %d: %v", stream, id, offset, err)
	}
	return r
}

// lines returns "<prefix><i>\n" for i from first to last.
func lines(prefix string, first, last int) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

// TestJobOutputByStream: a job that interleaves stdout and stderr is read
// by stream and merged, whole and from the middle, after its end and
// following it to its end: each stream alone is exactly its lines, with
// offsets of its own; merged, each frame says its stream and each
// stream's lines come in order.
func TestJobOutputByStream(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `sleep 0.3; for i in $(seq 1 1000); do echo out$i; echo err$i >&2; done; exit 3`})
	if err != nil {
		t.Fatal(err)
	}
	wantOut, wantErr := lines("out", 1, 1000), lines("err", 1, 1000)

	// Followers from the start, while it runs.
	views := []string{"", api.JobStreamAll, api.JobStreamStdout, api.JobStreamStderr}
	followed := make([]*viewRead, len(views))
	var wg sync.WaitGroup
	for i, v := range views {
		wg.Go(func() { followed[i] = readView(t, c, "t1", j.ID, v, 0, true) })
	}
	wg.Wait()
	info := waitJobEnd(t, c, "t1", j.ID)
	if *info.ExitCode != 3 || info.OutputBytes != int64(len(wantOut)+len(wantErr)) || info.DroppedBytes != 0 {
		t.Errorf("the job: %+v", info)
	}
	for i, v := range views {
		for _, r := range []*viewRead{followed[i], readView(t, c, "t1", j.ID, v, 0, false)} {
			want := [2]string{wantOut, wantErr}
			switch v {
			case api.JobStreamStdout:
				want[1] = ""
			case api.JobStreamStderr:
				want[0] = ""
			}
			if r.by[0].String() != want[0] || r.by[1].String() != want[1] || r.first != 0 || r.dropped != 0 {
				t.Errorf("view %q: stdout %d bytes, stderr %d bytes from %d (dropped %d); want %d and %d from 0",
					v, r.by[0].Len(), r.by[1].Len(), r.first, r.dropped, len(want[0]), len(want[1]))
			}
		}
		if end := followed[i].end; end == nil || end.Exit == nil || *end.Exit != 3 {
			t.Errorf("view %q: the follower's last frame %+v, want the end with exit 3", v, end)
		}
	}
	// Merged, frames of both streams come (each says its own). How
	// they alternate is the pipes' timing: the daemon may read all of
	// one before the other, so two frames are enough.
	streams := map[string]bool{}
	for _, f := range followed[1].frames {
		streams[f.Stream] = true
	}
	if len(streams) != 2 {
		t.Errorf("the merged view came in %d frames of %d streams, want both streams", len(followed[1].frames), len(streams))
	}

	// From the middle of one stream: its offsets are its own bytes.
	for _, c2 := range []struct {
		stream, prefix string
	}{{api.JobStreamStdout, "out"}, {api.JobStreamStderr, "err"}} {
		mid := int64(len(lines(c2.prefix, 1, 500)))
		r := readView(t, c, "t1", j.ID, c2.stream, mid, false)
		if r.first != mid || r.dropped != 0 || r.by[0].String()+r.by[1].String() != lines(c2.prefix, 501, 1000) {
			t.Errorf("%s from %d: from %d, %q...", c2.stream, mid, r.first, r.by[0].String()[:min(20, r.by[0].Len())]+r.by[1].String()[:min(20, r.by[1].Len())])
		}
		total := int64(len(lines(c2.prefix, 1, 1000)))
		if err := c.JobOutputStream(ctx, "acme", "t1", j.ID, c2.stream, total+1, false, func(api.JobFrame) error { return nil }); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%s past its end: %v, want invalid", c2.stream, err)
		}
	}
	// Merged from the middle: the rest of each stream, in order.
	all := int64(len(wantOut) + len(wantErr))
	r := readView(t, c, "t1", j.ID, api.JobStreamAll, all/2, false)
	if r.first != all/2 || !strings.HasSuffix(wantOut, r.by[0].String()) || !strings.HasSuffix(wantErr, r.by[1].String()) ||
		int64(r.by[0].Len()+r.by[1].Len()) != all-all/2 {
		t.Errorf("merged from %d: %d + %d bytes from %d", all/2, r.by[0].Len(), r.by[1].Len(), r.first)
	}
	if err := c.JobOutputStream(ctx, "acme", "t1", j.ID, "both", 0, false, func(api.JobFrame) error { return nil }); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("stream=both: %v, want invalid", err)
	}
}

// TestJobOutputStderrFlood: a job that writes more than 1 MiB to stderr
// between two lines of stdout: the stderr view keeps its newest 1 MiB and
// says what it dropped, the stdout view keeps both lines and drops
// nothing, and the merged view keeps the newest 1 MiB of both.
func TestJobOutputStderrFlood(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	// 200,000 lines of 16 bytes: 3.2 MB, every line different.
	const n, width = 200000, 16
	j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: fmt.Sprintf("echo before; seq -f %%015.0f 0 %d >&2; echo after", n-1)})
	if err != nil {
		t.Fatal(err)
	}
	waitJobEnd(t, c, "t1", j.ID)
	const errTotal, kept = n * width, 1 << 20
	var wantErr strings.Builder
	for i := (errTotal - kept) / width; i < n; i++ {
		fmt.Fprintf(&wantErr, "%015d\n", i)
	}
	out := readView(t, c, "t1", j.ID, api.JobStreamStdout, 0, false)
	if out.by[0].String() != "before\nafter\n" || out.first != 0 || out.dropped != 0 {
		t.Errorf("stdout: %q from %d, dropped %d", out.by[0].String(), out.first, out.dropped)
	}
	stderr := readView(t, c, "t1", j.ID, api.JobStreamStderr, 0, false)
	if stderr.by[1].String() != wantErr.String() || stderr.first != errTotal-kept || stderr.dropped != errTotal-kept {
		t.Errorf("stderr: %d bytes from %d, dropped %d; want the newest %d from %d, dropped %d",
			stderr.by[1].Len(), stderr.first, stderr.dropped, kept, errTotal-kept, errTotal-kept)
	}
	const total = int64(errTotal + len("before\nafter\n"))
	all := readView(t, c, "t1", j.ID, "", 0, false)
	if all.first != total-kept || all.dropped != total-kept || all.by[0].String() != "after\n" || !strings.HasSuffix(wantErr.String(), all.by[1].String()) ||
		all.by[1].Len() != kept-len("after\n") {
		t.Errorf("merged: stdout %q, %d bytes of stderr, from %d, dropped %d", all.by[0].String(), all.by[1].Len(), all.first, all.dropped)
	}
	if info, _ := c.Job(ctx, "acme", "t1", j.ID); info.OutputBytes != total || info.DroppedBytes != total-kept {
		t.Errorf("the job's sizes: %d written, %d dropped; want %d, %d", info.OutputBytes, info.DroppedBytes, total, total-kept)
	}
}

// TestJobOutputStreamsMoved: a command moved to the background keeps its
// streams apart in its job.
func TestJobOutputStreamsMoved(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	var out, errOut testenv.SyncBuffer
	ids := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "acme", "t1", api.ExecRequest{Command: `echo o1; echo e1 >&2; read x; echo o2; echo e2 >&2; exit 4`, OpenStdin: true},
			func(id string) { ids <- id }, &out, &errOut)
		done <- err
	}()
	id := <-ids
	for deadline := time.Now().Add(10 * time.Second); out.String() != "o1\n" || errOut.String() != "e1\n"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command wrote %q and %q", out.String(), errOut.String())
		}
	}
	j, err := c.Background(ctx, "acme", "t1", id, api.BackgroundRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.As(err, new(*api.MovedError)) {
		t.Fatalf("the exec's answer: %v", err)
	}
	if err := c.JobStdin(ctx, "acme", "t1", j.ID, "go\n", true); err != nil {
		t.Fatal(err)
	}
	if info := waitJobEnd(t, c, "t1", j.ID); *info.ExitCode != 4 {
		t.Errorf("the moved job: %+v", info)
	}
	if r := readView(t, c, "t1", j.ID, api.JobStreamStdout, 0, true); r.by[0].String() != "o2\n" || r.by[1].Len() != 0 {
		t.Errorf("the moved job's stdout: %q", r.by[0].String())
	}
	if r := readView(t, c, "t1", j.ID, api.JobStreamStderr, 0, true); r.by[1].String() != "e2\n" || r.by[0].Len() != 0 {
		t.Errorf("the moved job's stderr: %q", r.by[1].String())
	}
	if r := readView(t, c, "t1", j.ID, api.JobStreamAll, 0, true); r.by[0].String() != "o2\n" || r.by[1].String() != "e2\n" || len(r.frames) != 2 {
		t.Errorf("the moved job's output: %+v", r.frames)
	}
}

// TestJobOutputEventsByStream: job.output events say their stream, and
// each stream's events are its output in order.
func TestJobOutputEventsByStream(t *testing.T) {
	env := startEnv(t, Config{})
	c := env.c
	ctx, cancel := context.WithCancel(jobCtx(t))
	defer cancel()
	events := follow(t, c, "acme", "t1")
	waitSubscribers(t, env.g, 1)
	j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: `for i in $(seq 1 200); do echo out$i; echo err$i >&2; done`})
	if err != nil {
		t.Fatal(err)
	}
	var got [2]strings.Builder
	for {
		ev := events.next(t)
		if ev.Type == api.EventJobEnded {
			break
		}
		if ev.Type != api.EventJobOutput {
			continue
		}
		switch ev.Stream {
		case "stdout":
			got[0].WriteString(ev.Data)
		case "stderr":
			got[1].WriteString(ev.Data)
		default:
			t.Fatalf("a job.output event of stream %q: %+v", ev.Stream, ev)
		}
		if ev.Job != j.ID {
			t.Fatalf("an event of another job: %+v", ev)
		}
	}
	if got[0].String() != lines("out", 1, 200) || got[1].String() != lines("err", 1, 200) {
		t.Errorf("events: stdout %q, stderr %q", got[0].String(), got[1].String())
	}
}

// TestJobOutputMergedOrder: a write to one stream and then one to the
// other keep their order in the merged view, however close together (a
// shell saying "Terminated" on stderr before its trap's "bye" on
// stdout), as they did when both streams shared one pipe: the two pipes
// are watched together from before the command starts (jobpipes_linux.go).
func TestJobOutputMergedOrder(t *testing.T) {
	env := startEnv(t, Config{})
	c, ctx := env.c, jobCtx(t)
	for i := range 20 {
		first, second := "stdout", "stderr"
		command := "echo one; echo two >&2"
		if i%2 == 1 {
			first, second = second, first
			command = "echo one >&2; echo two"
		}
		if i%4 >= 2 {
			command = fmt.Sprintf("sleep 0.0%d; %s", i%10, command)
		}
		j, err := c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: command})
		if err != nil {
			t.Fatal(err)
		}
		waitJobEnd(t, c, "t1", j.ID)
		var got []string
		for _, fr := range readView(t, c, "t1", j.ID, api.JobStreamAll, 0, false).frames {
			got = append(got, fr.Stream+" "+fr.Data)
		}
		if want := []string{first + " one\n", second + " two\n"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: merged frames %q, want %q", command, got, want)
		}
	}
}
