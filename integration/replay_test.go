package integration

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"warren/api"
)

// TestEventReplay: a reader that saw events up to seq S comes back, after
// the daemon was killed (-9) and started again, with since=S: it is given
// what happened while it was away, once each, in order, numbered on from
// S, before the live events; file events too, for a reader that left
// lately. With more events than the log keeps, a missed event first
// tells how many are gone.
func TestEventReplay(t *testing.T) {
	d := newDaemon(t, "--event-log", "20")
	mnt := d.bind("default", "t")
	c := d.client()
	ctx := context.Background()

	first := d.subscribe("t")
	must(t, os.WriteFile(filepath.Join(mnt, "seen.txt"), []byte("x"), 0o644))
	seen := waitEvent(t, first, "file.created of /seen.txt", func(ev api.Event) bool {
		return ev.Type == api.EventFileCreated && ev.Path == "/seen.txt"
	})
	first.stop()
	// Away: a file written, then the daemon killed and started again, and
	// a job run.
	must(t, os.WriteFile(filepath.Join(mnt, "away.txt"), []byte("y"), 0o644))
	// Another thread's event, kept in the log too: a replay for t passes
	// it over.
	d.bind("default", "u")
	d.kill9()
	d.start()
	job, err := c.Spawn(ctx, "", "t", api.SpawnRequest{Command: "true"})
	must(t, err)
	waitJobEnded(t, c, "t", job.ID)

	back := d.subscribeQuery(url.Values{"thread": {"t"}, "since": {strconv.FormatUint(seen.Seq, 10)}})
	ended := func(ev api.Event) bool { return ev.Type == api.EventJobEnded && ev.Job == job.ID }
	waitEvent(t, back, "the job's end, replayed", ended)
	var types []string
	last := seen.Seq
	for _, ev := range back.all() {
		if ev.Seq <= last {
			t.Errorf("replayed %s with seq %d after seq %d: not after since, or out of order", ev.Type, ev.Seq, last)
		}
		last = ev.Seq
		if ev.Thread != "t" {
			t.Errorf("a replay for thread t holds %s of thread %q", ev.Type, ev.Thread)
		}
		types = append(types, string(ev.Type)+" "+ev.Path)
		if ended(ev) {
			break
		}
	}
	want := map[string]bool{"file.created /away.txt": false, "job.started ": false, "job.ended ": false}
	for _, ty := range types {
		if _, ok := want[ty]; ok {
			want[ty] = true
		}
		if ty == "file.created /seen.txt" || ty == "missed " {
			t.Errorf("replay after since=%d holds %q", seen.Seq, ty)
		}
	}
	for ty, got := range want {
		if !got {
			t.Errorf("replay after since=%d misses %q: %v", seen.Seq, ty, types)
		}
	}

	// More than the log keeps: the reader is told how many it lost.
	back.stop()
	mark := last
	for i := range 30 {
		d.bind("default", "many-"+strconv.Itoa(i))
	}
	lost := d.subscribeQuery(url.Values{"since": {strconv.FormatUint(mark, 10)}})
	ev := waitEvent(t, lost, "missed", func(ev api.Event) bool { return ev.Type == api.EventMissed })
	all := lost.all()
	if all[0].Type != api.EventMissed || ev.Missed == 0 {
		t.Fatalf("first event after a since older than the log: %+v", all[0])
	}
	// The missed ones and the kept ones are every event after mark.
	waitEvent(t, lost, "the last bind", func(ev api.Event) bool { return ev.Type == api.EventThreadBound && ev.Thread == "many-29" })
	all = lost.all()
	kept := all[1:]
	if kept[0].Seq != mark+ev.Missed+1 {
		t.Errorf("missed %d after seq %d, then seq %d; want %d", ev.Missed, mark, kept[0].Seq, mark+ev.Missed+1)
	}
	if len(kept) > 20+1 {
		t.Errorf("%d events replayed from a log of 20", len(kept))
	}
}
