package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// TestFileEvents makes changes through the thread's mount, a writable
// inspection mount and the file API, and reads them back as file events:
// once each, in order, each with its actor; a burst of rewrites of one
// file is a few file.changed events, not one per write; and a reader
// that asks for a path prefix gets only the file events under it.
func TestFileEvents(t *testing.T) {
	d := newDaemon(t)
	mnt := d.bind("default", "t")
	rw := t.TempDir()
	d.mustWarren("mount", "--thread", "t", "--rw", rw)
	t.Cleanup(func() { d.warren("umount", rw) })
	c := d.client()
	ctx := context.Background()
	all := d.subscribe("t")
	sub := d.subscribeQuery(url.Values{"thread": {"t"}, "prefix": {"/sub/"}})
	must(t, c.RegisterRun(ctx, "", "t", os.Getpid(), "lead"))

	must(t, os.WriteFile(filepath.Join(mnt, "a.txt"), []byte("first"), 0o644))
	const burst = 50
	began := time.Now()
	for i := range burst {
		must(t, os.WriteFile(filepath.Join(mnt, "a.txt"), []byte(strconv.Itoa(i)), 0o644))
	}
	took := time.Since(began)
	must(t, os.WriteFile(filepath.Join(rw, "b.txt"), []byte("b"), 0o644))
	must(t, c.Files().Mkdir(ctx, "", "t", api.MkdirRequest{Path: "sub", Run: "api"}))
	_, err := c.Files().Write(ctx, "", "t", api.WriteFileRequest{Path: "sub/c.txt", Run: "api", Content: "c"})
	must(t, err)
	must(t, os.Rename(filepath.Join(mnt, "b.txt"), filepath.Join(mnt, "sub", "d.txt")))
	_, err = c.Files().Remove(ctx, "", "t", api.RemoveRequest{Path: "sub/c.txt", Run: "api"})
	must(t, err)

	last := func(ev api.Event) bool { return ev.Type == api.EventFileRemoved && ev.Path == "/sub/c.txt" }
	waitEvent(t, all, "file.removed of /sub/c.txt", last)
	waitEvent(t, sub, "file.removed of /sub/c.txt, under the prefix", last)
	// A creation opens its path's window: the rewrites of a.txt right
	// after it are told as one change when the window ends.
	waitEvent(t, all, "file.changed of /a.txt", func(ev api.Event) bool { return ev.Type == api.EventFileChanged && ev.Path == "/a.txt" })

	// The creations, renames and removals in order, each once; the
	// changes after the creation of their path. A handle's close is told
	// when the kernel sends it, after close(2) returned: b.txt's change
	// may come after later calls, or name b.txt's new path.
	var got []string
	changed := map[string]int{}
	seen := map[string]bool{}
	for _, ev := range all.all() {
		if !strings.HasPrefix(string(ev.Type), "file.") {
			continue
		}
		if ev.Version == 0 && ev.Type != api.EventFileRemoved {
			t.Errorf("%+v: no version", ev)
		}
		if ev.Type == api.EventFileChanged {
			changed[ev.Path]++
			if !seen[ev.Path] || ev.Actor != "run lead" {
				t.Errorf("file.changed of %s by %q before its creation, or not by the lead", ev.Path, ev.Actor)
			}
			continue
		}
		seen[ev.Path] = true
		line := fmt.Sprintf("%s %s %s", ev.Type, ev.Path, ev.Actor)
		if ev.From != "" {
			line = fmt.Sprintf("%s %s->%s %s", ev.Type, ev.From, ev.Path, ev.Actor)
		}
		got = append(got, line)
	}
	want := []string{
		"file.created /a.txt run lead",
		"file.created /b.txt run lead",
		"file.created /sub run api",
		"file.created /sub/c.txt run api",
		"file.renamed /b.txt->/sub/d.txt run lead",
		"file.removed /sub/c.txt run api",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("file events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// 51 writes of a.txt, each an open that truncates and a close: at
	// most one event per 100 ms window of the burst (and one held back to
	// its end), not one per write. b.txt's one write: one change.
	most := int(took/(100*time.Millisecond)) + 3
	if n := changed["/a.txt"]; n < 1 || n > most || n >= burst {
		t.Errorf("%d file.changed events of /a.txt for %d rewrites in %v, want 1 to %d", n, burst+1, took, most)
	}
	if n := changed["/b.txt"] + changed["/sub/d.txt"]; n != 1 {
		t.Errorf("%d file.changed events of b.txt (written once), want 1: %v", n, changed)
	}

	// A prefix reader alone is enough for the events to be built.
	only := d.subscribeQuery(url.Values{"thread": {"u"}, "prefix": {"/src/"}})
	d.bind("default", "u")
	_, err = c.Files().Write(ctx, "", "u", api.WriteFileRequest{Path: "src/x.go", Content: "x"})
	must(t, err)
	waitEvent(t, only, "file.created of /src/x.go, the only reader asking for /src/", func(ev api.Event) bool {
		return ev.Type == api.EventFileCreated && ev.Path == "/src/x.go"
	})

	var under []string
	for _, ev := range sub.all() {
		under = append(under, fmt.Sprintf("%s %s%s", ev.Type, ev.From, ev.Path))
	}
	wantUnder := []string{"file.created /sub/c.txt", "file.renamed /b.txt/sub/d.txt", "file.removed /sub/c.txt"}
	if strings.Join(under, "\n") != strings.Join(wantUnder, "\n") {
		t.Errorf("events under /sub/:\n%s\nwant:\n%s", strings.Join(under, "\n"), strings.Join(wantUnder, "\n"))
	}
}
