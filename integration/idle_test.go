package integration

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/meta"
)

// TestIdleReclaim: a thread whose jail idles past its jailIdleSeconds
// loses its jail (a jail.reclaimed event, nothing of it in the usage),
// stays mounted, and its next command starts a new jail; a job keeps its
// jail however long it runs. A thread with closeIdleSeconds is closed once
// nothing uses it, its folder kept, and a request through its mount
// counts as a use.
func TestIdleReclaim(t *testing.T) {
	d := newDaemon(t)
	c := d.client()
	ctx := context.Background()
	events := d.subscribe("")

	_, err := c.BindWith(ctx, "", "idler", meta.Settings{JailIdleSeconds: 1})
	must(t, err)
	run := func(thread, command string) {
		t.Helper()
		if code, err := c.Exec(ctx, "", thread, api.ExecRequest{Command: command}, io.Discard, io.Discard); err != nil || code != 0 {
			t.Fatalf("%s in %s: exit %d, %v", command, thread, code, err)
		}
	}
	run("idler", "echo hi > f")
	if u, err := c.Usage(ctx, "", "idler"); err != nil || !u.Jail {
		t.Fatalf("after a command: %+v, %v; want a jail", u, err)
	}
	ev := waitEvent(t, events, "jail.reclaimed", func(ev api.Event) bool {
		return ev.Type == api.EventJailReclaimed && ev.Thread == "idler"
	})
	if !strings.Contains(ev.Message, "No command or job ran") {
		t.Errorf("event: %+v", ev)
	}
	u, err := c.Usage(ctx, "", "idler")
	must(t, err)
	ti, err := c.Thread(ctx, "", "idler")
	must(t, err)
	if u.Jail || u.Processes != 0 || !ti.Mounted || u.DiskFiles != 1 {
		t.Errorf("after the reclaim: usage %+v, mounted %v; want no jail, still mounted, its file there", u, ti.Mounted)
	}
	run("idler", "test \"$(cat f)\" = hi") // a new jail, the same files
	if u, err := c.Usage(ctx, "", "idler"); err != nil || !u.Jail {
		t.Errorf("after the next command: %+v, %v; want a jail again", u, err)
	}

	// A job keeps its jail past the idle time: a witness whose jail went
	// idle after the job started is reclaimed, the job's is not.
	job, err := c.Spawn(ctx, "", "idler", api.SpawnRequest{Command: "sleep 300"})
	must(t, err)
	_, err = c.BindWith(ctx, "", "witness", meta.Settings{JailIdleSeconds: 1})
	must(t, err)
	run("witness", "true")
	waitEvent(t, events, "jail.reclaimed of the witness", func(ev api.Event) bool {
		return ev.Type == api.EventJailReclaimed && ev.Thread == "witness"
	})
	if info, err := c.Job(ctx, "", "idler", job.ID); err != nil || !info.Running {
		t.Errorf("a job past its jail's idle time: %+v, %v; want it running", info, err)
	}
	if u, err := c.Usage(ctx, "", "idler"); err != nil || !u.Jail {
		t.Errorf("a jail with a job running, past its idle time: %+v, %v; want it kept", u, err)
	}
	_, err = c.StopJob(ctx, "", "idler", job.ID, 0)
	must(t, err)

	// A thread closed when idle, kept open by writes through its mount:
	// while they go on, a second thread with the same close idle time and
	// no use is closed, and the first is not.
	bound, err := c.BindWith(ctx, "", "closer", meta.Settings{CloseIdleSeconds: 2})
	must(t, err)
	_, err = c.BindWith(ctx, "", "unused", meta.Settings{CloseIdleSeconds: 2})
	must(t, err)
	unusedClosed := func(ev api.Event) bool { return ev.Type == api.EventThreadClosed && ev.Thread == "unused" }
	for i := 0; ; i++ {
		must(t, os.WriteFile(filepath.Join(bound.MountPath, "tick"), []byte(strconv.Itoa(i)), 0o644))
		if _, ok := events.waitFor(100*time.Millisecond, unusedClosed); ok {
			break
		}
		if i > 300 {
			t.Fatal("the unused thread was not closed within 30 s")
		}
	}
	if ti, err := c.Thread(ctx, "", "closer"); err != nil || !ti.Mounted {
		t.Fatalf("a thread written through its mount all along: %+v, %v; want it open", ti, err)
	}
	ev = waitEvent(t, events, "thread.closed", func(ev api.Event) bool {
		return ev.Type == api.EventThreadClosed && ev.Thread == "closer"
	})
	if !strings.Contains(ev.Message, "without use; the folder is kept") {
		t.Errorf("event: %+v", ev)
	}
	ti, err = c.Thread(ctx, "", "closer")
	must(t, err)
	if ti.Mounted || ti.State != meta.StateClosed {
		t.Errorf("after its close idle time: %+v; want closed, not mounted", ti)
	}
	// The idler, without closeIdleSeconds, stays open.
	if ti, err := c.Thread(ctx, "", "idler"); err != nil || !ti.Mounted {
		t.Errorf("a thread without a close idle time: %+v, %v", ti, err)
	}
}
