package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
)

// The hosts tests: several warren servers, each with a host id and a data
// folder of its own, share one 3-member etcd cluster, on one machine. A
// thread belongs to the server that bound it while that server's lease
// lives; the others refuse it; when the owner dies and its lease expires,
// the next server that gets a call takes the thread over.

// takeoverSlack is how much earlier than expiresAfter − renewEvery after
// its owner's death a thread may be taken over: the owner's last
// heartbeat may have come a little late, or reached etcd a little before
// the kill was sent.
const takeoverSlack = 250 * time.Millisecond

// earliestTakeover is the least time from the death of a thread's owner
// until another server may serve it: its lease, renewed at most
// renewEvery (and a little slack) before it died, must have expired.
const earliestTakeover = expiresAfter - renewEvery - takeoverSlack

// The notes a job that ran on a former owner gets on the new one.
const (
	noteStopped  = "Background job bash-1 was stopped: it ran on a host before the session moved to this one."
	noteMayStill = "Background job bash-1 may still run: it ran on a host before this one, and this host cannot stop it."
)

// namedCall is one call of the API on a thread, answering only its error.
type namedCall struct {
	name string
	call func() error
}

// threadCalls are the calls of the API on one thread (default tenant)
// that work on its workspace, then close and delete if withEnd.
func threadCalls(c *client.Client, thread string, withEnd bool) []namedCall {
	ctx := context.Background()
	calls := []namedCall{
		{"bind", func() error { _, err := c.Bind(ctx, "", thread); return err }},
		{"exec", func() error {
			_, _, err := execAPI(c, 20*time.Second, thread, "cat f")
			return err
		}},
		{"spawn", func() error {
			_, err := c.Spawn(ctx, "", thread, api.SpawnRequest{Command: "sleep 1"})
			return err
		}},
		{"files/read", func() error {
			_, err := c.Files().Read(ctx, "", thread, api.ReadFileRequest{Path: "f"})
			return err
		}},
		{"files/write", func() error {
			_, err := c.Files().Write(ctx, "", thread, api.WriteFileRequest{Path: "w", Content: "x"})
			return err
		}},
		{"checkpoint", func() error {
			_, err := c.History().Checkpoint(ctx, "", thread, api.CheckpointRequest{})
			return err
		}},
		{"undo", func() error { _, err := c.History().Undo(ctx, "", thread, true); return err }},
		{"diff", func() error { _, err := c.History().Diff(ctx, "", thread, "", "", false); return err }},
		{"fork", func() error { _, err := c.History().Fork(ctx, "", thread, api.ForkRequest{}); return err }},
	}
	if withEnd {
		calls = append(calls,
			namedCall{"close", func() error { _, err := c.CloseThread(ctx, "", thread); return err }},
			namedCall{"delete", func() error { return c.DeleteThread(ctx, "", thread) }},
		)
	}
	return calls
}

// waitPastPinned calls `exec --thread thread -- command` on d every 100 ms
// while d refuses it as pinned to owner (root being the thread's folder
// there), and returns the first other answer and when it came.
func waitPastPinned(t *testing.T, d *daemon, thread, command, root, owner string) (cliResult, time.Time) {
	t.Helper()
	pinned := pinnedMessage(root, owner)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// The first command after a takeover may wait for a restore the
		// former owner left unfinished (thousands of files, on a loaded
		// machine): it gets a minute.
		r := d.run(time.Minute, "exec", "--thread", thread, "--", command)
		// The waiting server's own lease may lapse too when the store is
		// slow (an overloaded etcd misses heartbeats): it refuses as
		// fenced until it renews, and then serves. Waited out like the
		// pin; any other answer is the test's to judge.
		fenced := r.code == 1 && strings.Contains(r.stderr, "(fenced)")
		if fenced {
			t.Logf("exec on %s: the waiting server is fenced for now: %s", thread, strings.TrimSpace(r.stderr))
		}
		if !fenced && (r.code != 1 || !strings.Contains(r.stderr, pinned)) {
			return r, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec on %s: still refused (pinned to %s, or fenced) after 20s: %v", thread, owner, r)
		}
	}
}

// TestHostsPinnedRefusal: a thread bound on A is A's. B, on the same
// store, refuses every call for it (CLI and API) with the pinned message
// naming A's folder and host id, and changes nothing of it.
func TestHostsPinnedRefusal(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	b := c.host("host-b")
	mp := a.bind("default", "t1")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("from a\n"), 0o644))
	info := a.threadInfo("t1")
	if info.HostID != "host-a" {
		t.Errorf("A's binding has host %q, want host-a", info.HostID)
	}
	want := pinnedMessage(info.Root, "host-a")

	for _, args := range [][]string{
		{"bind", "--thread", "t1"},
		{"exec", "--thread", "t1", "--", "cat f"},
		{"spawn", "--thread", "t1", "--", "sleep 1"},
		{"checkpoint", "--thread", "t1"},
		{"revert", "--thread", "t1", "cp-1"},
		{"close", "--thread", "t1"},
		{"delete", "--thread", "t1"},
	} {
		r := b.run(20*time.Second, args...)
		if r.code != 1 || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Errorf("B: warren %s: %v\nwant exit 1 and %q", strings.Join(args, " "), r, want)
		}
	}
	for _, c := range threadCalls(b.client(), "t1", true) {
		err := c.call()
		if e := apiError(err); e == nil || e.Status != http.StatusConflict || e.Code != "pinned" || !strings.Contains(e.Message, want) {
			t.Errorf("B: API %s: %v, want 409 pinned with %q", c.name, err, want)
		}
	}

	// Nothing of that reached the thread: A serves it as it was.
	if out := a.mustWarren("exec", "--thread", "t1", "--", "ls; cat f"); out != "f\nfrom a\n" {
		t.Errorf("A after B's refused calls: %q", out)
	}
	if got, ok := b.listed("t1"); !ok || got.HostID != "host-a" || got.Root != info.Root {
		t.Errorf("B's ls: %+v (listed %v), want host-a's thread at %s", got, ok, info.Root)
	}
	if out := b.mustWarren("ls"); !strings.Contains(out, "host-a") {
		t.Errorf("B's ls does not show the owner host-a:\n%s", out)
	}
	hosts := b.hosts()
	for _, id := range []string{"host-a", "host-b"} {
		if h, ok := hosts[id]; !ok || !h.Alive || h.LastBeat.IsZero() {
			t.Errorf("hosts: %s is %+v (listed %v), want alive with a heartbeat", id, h, ok)
		}
	}
	if out := b.mustWarren("hosts"); !strings.Contains(out, "host-a") || !strings.Contains(out, "host-b") {
		t.Errorf("warren hosts does not list both hosts:\n%s", out)
	}
}

// TestHostsTakeoverAfterKill9: A, the owner, is killed; B is refused until
// A's lease has expired, then serves the thread on A's folder, with A's
// files. A, started again, is refused: the thread is B's now.
func TestHostsTakeoverAfterKill9(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	b := c.host("host-b")
	mp := a.bind("default", "t1")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("from a\n"), 0o644))
	rootA := a.threadInfo("t1").Root
	// B does not serve it while A lives: the success below is a takeover.
	if r := b.run(20*time.Second, "exec", "--thread", "t1", "--", "cat f"); r.code != 1 || !strings.Contains(r.stderr, pinnedMessage(rootA, "host-a")) {
		t.Fatalf("B while A lives: %v", r)
	}

	killed := time.Now()
	a.kill9()
	r, first := waitPastPinned(t, b, "t1", "cat f", rootA, "host-a")
	unavailable := first.Sub(killed)
	t.Logf("unavailable for %v: from the kill -9 of the owner to the first call B served (expires-after %v, renew-every %v)",
		unavailable.Round(time.Millisecond), expiresAfter, renewEvery)
	if h, ok := b.hosts()["host-a"]; ok && !h.LastBeat.IsZero() {
		t.Logf("host-a's last heartbeat was %v before the kill; B served %v after it",
			killed.Sub(h.LastBeat).Round(time.Millisecond), first.Sub(h.LastBeat).Round(time.Millisecond))
	}
	if r.code != 0 || r.stdout != "from a\n" {
		t.Fatalf("B after A's lease expired: %v, want A's file", r)
	}
	if unavailable < earliestTakeover {
		t.Errorf("B served the thread %v after A died: before A's lease (%v, renewed every %v) could have expired", unavailable, expiresAfter, renewEvery)
	}
	if unavailable > expiresAfter+5*time.Second {
		t.Errorf("B served the thread only %v after A died, with leases of %v", unavailable, expiresAfter)
	}

	// B resumed on A's folder: same files, and B's writes land there.
	info := b.threadInfo("t1")
	if info.HostID != "host-b" || info.Root != rootA {
		t.Errorf("binding after the takeover: host %q, root %q; want host-b on %s", info.HostID, info.Root, rootA)
	}
	b.mustWarren("exec", "--thread", "t1", "--", "echo from b > g")
	if got, err := os.ReadFile(filepath.Join(rootA, "g")); err != nil || string(got) != "from b\n" {
		t.Errorf("B's write is not in A's folder: %q, %v", got, err)
	}
	if got, ok := b.listed("t1"); !ok || got.HostID != "host-b" {
		t.Errorf("ls after the takeover: %+v (listed %v), want host-b", got, ok)
	}
	hosts := b.hosts()
	if h := hosts["host-a"]; h.Alive {
		t.Errorf("hosts: host-a, killed, is alive: %+v", h)
	}
	if h := hosts["host-b"]; !h.Alive {
		t.Errorf("hosts: host-b is not alive: %+v", h)
	}

	// A comes back: the thread is not A's any more. Its mount, dead since
	// the kill, is detached (as a restart does for its own threads), and
	// serves nothing.
	a.start()
	if left := testenv.MountsUnder(t, a.data); len(left) != 0 {
		t.Errorf("A, restarted, left mounts of the thread B took: %v", left)
	}
	if _, err := os.ReadFile(filepath.Join(mp, "f")); err == nil {
		t.Errorf("A, restarted, serves the thread B took at its old mount %s", mp)
	}
	want := pinnedMessage(info.Root, "host-b")
	if r := a.run(20*time.Second, "exec", "--thread", "t1", "--", "cat g"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("A, restarted, on B's thread: %v\nwant exit 1 and %q", r, want)
	}
	if out := b.mustWarren("exec", "--thread", "t1", "--", "cat f g"); out != "from a\nfrom b\n" {
		t.Errorf("B after A's restart: %q", out)
	}
}

// TestHostsUndoAfterTakeover: the checkpoints of a thread live in the
// store and a snapshot repository both servers reach: after the owner
// dies and another server takes the thread over, undo, redo and revert
// work there, on the checkpoints the dead owner took.
func TestHostsUndoAfterTakeover(t *testing.T) {
	c := newHostCluster(t)
	snaps := filepath.Join(t.TempDir(), "snapshots")
	a := c.host("host-a", "--snapshots", snaps)
	b := c.host("host-b", "--snapshots", snaps)
	mp := a.bind("default", "t1")
	a.mustWarren("exec", "--thread", "t1", "--", "echo one > f && mkdir -p d/e && ln -s f l && chmod 750 d")
	s1 := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "t1", "--label", "one")
	a.mustWarren("exec", "--thread", "t1", "--", "echo two > f && rm -r d && echo new > g")
	s2 := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "t1", "--label", "two")
	a.mustWarren("exec", "--thread", "t1", "--", "echo three > f")
	s3 := captureTree(t, mp)
	rootA := a.threadInfo("t1").Root

	a.kill9()
	if r, _ := waitPastPinned(t, b, "t1", "cat f", rootA, "host-a"); r.code != 0 || r.stdout != "three\n" {
		t.Fatalf("B after the takeover: %v", r)
	}
	mpB := b.threadInfo("t1").MountPath
	out := b.mustWarren("undo", "--thread", "t1")
	if !strings.Contains(out, "saved the changes in cp-3") || !strings.Contains(out, "undo: at cp-2") {
		t.Fatalf("undo on B: %q", out)
	}
	wantTree(t, "an undo on the server that took the thread over", mpB, s2)
	b.mustWarren("undo", "--thread", "t1")
	wantTree(t, "a second undo there", mpB, s1)
	b.mustWarren("redo", "--thread", "t1")
	wantTree(t, "a redo there", mpB, s2)
	b.mustWarren("revert", "--thread", "t1", "cp-3")
	wantTree(t, "a revert there", mpB, s3)
	list := b.mustWarren("checkpoints", "--thread", "t1")
	for _, want := range []string{"cp-1", "cp-2", "cp-3", "head"} {
		if !strings.Contains(list, want) {
			t.Errorf("checkpoints on B lack %s:\n%s", want, list)
		}
	}
}

// TestHostsRestoreCutShortByADeath: the owner dies in the middle of a
// restore; the server that takes the thread over finishes it before it
// serves the thread's first command.
func TestHostsRestoreCutShortByADeath(t *testing.T) {
	c := newHostCluster(t)
	snaps := filepath.Join(t.TempDir(), "snapshots")
	a := c.host("host-a", "--snapshots", snaps)
	b := c.host("host-b", "--snapshots", snaps)
	mp := a.bind("default", "t1")
	a.mustWarren("exec", "--thread", "t1", "--", restoreLoad("old"))
	old := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "t1")
	a.mustWarren("exec", "--thread", "t1", "--", restoreLoad("new"))
	a.mustWarren("checkpoint", "--thread", "t1")
	rootA := a.threadInfo("t1").Root
	ac := a.client()
	for try := 1; ; try++ {
		pid := a.pid()
		done := make(chan struct{})
		go func() { defer close(done); ac.History().Revert(context.Background(), "", "t1", "cp-1", false) }()
		mid := waitRestoreStarted(t, filepath.Join(a.data, "workspaces"), "old 1\n")
		syscall.Kill(pid, syscall.SIGKILL)
		a.kill9()
		<-done
		if mid {
			break
		}
		if try == 5 {
			t.Fatal("the restore always ended before the kill")
		}
		a.start()
		a.mustWarren("revert", "--thread", "t1", "cp-2")
	}
	if r, _ := waitPastPinned(t, b, "t1", "cat a/f1 a/f4000", rootA, "host-a"); r.code != 0 || r.stdout != "old 1\nold 4000\n" {
		t.Fatalf("B's first command after the takeover: %v", r)
	}
	wantTree(t, "the workspace B took over", b.threadInfo("t1").MountPath, old)
	if !strings.Contains(b.allLogs(), "finishing a restore that was cut short") {
		t.Error("B did not say it finished the restore")
	}
}

// TestHostsGoneAndFresh: the owner dies and its threads' folders are moved
// away before any takeover. A server configured "gone" refuses such a
// thread with 410 on every call and tells the event stream it is stranded;
// one configured "fresh" gives it a new empty workspace, seeded once.
func TestHostsGoneAndFresh(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	g := c.host("host-g", "--on-unreachable", "gone")
	f := c.host("host-f", "--on-unreachable", "fresh", "--seed-command", "echo seeded >> SEED")
	roots := map[string]string{}
	for _, th := range []string{"t-gone", "t-fresh"} {
		mp := a.bind("default", th)
		must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("old\n"), 0o644))
		roots[th] = a.threadInfo(th).Root
	}
	events := g.subscribe("")
	a.kill9()
	for _, root := range roots {
		must(t, os.Rename(root, root+".away"))
	}

	// gone: refused as pinned while A's lease lives, then as gone.
	root := roots["t-gone"]
	wantGone := goneMessage(root, "host-a")
	r, _ := waitPastPinned(t, g, "t-gone", "cat f", root, "host-a")
	if r.code != 1 || !strings.Contains(r.stderr, wantGone) {
		t.Errorf("gone server, first call after A's lease expired: %v\nwant exit 1 and %q", r, wantGone)
	}
	for _, c := range threadCalls(g.client(), "t-gone", false) {
		err := c.call()
		if e := apiError(err); e == nil || e.Status != http.StatusGone || e.Code != "gone" || !strings.Contains(e.Message, wantGone) {
			t.Errorf("gone server: API %s: %v, want 410 gone with %q", c.name, err, wantGone)
		}
	}
	if r := g.run(20*time.Second, "bind", "--thread", "t-gone"); r.code != 1 || !strings.Contains(r.stderr, wantGone) {
		t.Errorf("gone server: bind: %v", r)
	}
	if _, ok := events.waitFor(5*time.Second, func(ev api.Event) bool {
		return ev.Type == "thread.stranded" && ev.Tenant == api.DefaultTenant && ev.Thread == "t-gone"
	}); !ok {
		t.Errorf("no thread.stranded event for t-gone on the gone server's stream:\n%s", events)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an empty folder was made in place of the gone one: %v", err)
	}
	if made, _ := filepath.Glob(filepath.Join(g.data, "workspaces", "*", "*")); len(made) != 0 {
		t.Errorf("the gone server made workspaces: %v", made)
	}

	// fresh: a new empty workspace on F, holding only what the seed made.
	r, _ = waitPastPinned(t, f, "t-fresh", "ls -A; cat SEED", roots["t-fresh"], "host-a")
	if r.code != 0 || r.stdout != "SEED\nseeded\n" {
		t.Errorf("fresh server, first call after A's lease expired: %v\nwant a workspace holding only SEED", r)
	}
	info := f.threadInfo("t-fresh")
	if info.HostID != "host-f" || !strings.HasPrefix(info.Root, f.data+"/") {
		t.Errorf("fresh binding: host %q, root %q; want host-f, in %s", info.HostID, info.Root, f.data)
	}
	f.mustWarren("exec", "--thread", "t-fresh", "--", "true")
	// The seed ran once: not again on later calls, nor after a restart.
	f.stop()
	f.start()
	if out := f.mustWarren("exec", "--thread", "t-fresh", "--", "ls -A; cat SEED"); out != "SEED\nseeded\n" {
		t.Errorf("fresh workspace after more calls and a restart: %q", out)
	}
	if got, err := os.ReadFile(filepath.Join(roots["t-fresh"]+".away", "f")); err != nil || string(got) != "old\n" {
		t.Errorf("the moved-away folder was touched: %q, %v", got, err)
	}
}

// TestHostsUnpin: unpin on another server is refused while the owner
// lives, and moves the thread to that server at once after the owner died
// and its lease expired.
func TestHostsUnpin(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	b := c.host("host-b")
	mp := a.bind("default", "t1")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("from a\n"), 0o644))
	const refusal = "is pinned to the live host host-a"
	if r := b.run(20*time.Second, "unpin", "--thread", "t1"); r.code != 1 || !strings.Contains(r.stderr, refusal) {
		t.Fatalf("unpin while the owner lives: %v\nwant exit 1 and %q", r, refusal)
	}
	if got, ok := b.listed("t1"); !ok || got.HostID != "host-a" {
		t.Errorf("ls after a refused unpin: %+v (listed %v), want host-a", got, ok)
	}
	if out := a.mustWarren("exec", "--thread", "t1", "--", "cat f"); out != "from a\n" {
		t.Errorf("A after a refused unpin: %q", out)
	}

	killed := time.Now()
	a.kill9()
	var moved time.Duration
	for deadline := killed.Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r := b.run(15*time.Second, "unpin", "--thread", "t1")
		if r.code == 0 {
			moved = time.Since(killed)
			break
		}
		if r.code != 1 || !strings.Contains(r.stderr, refusal) {
			t.Fatalf("unpin after the owner died: %v\nwant success, or the refusal %q while its lease lives", r, refusal)
		}
		if time.Now().After(deadline) {
			t.Fatalf("unpin still refused 20s after the owner died: %v", r)
		}
	}
	t.Logf("unpin accepted %v after the owner's kill -9", moved.Round(time.Millisecond))
	if moved < earliestTakeover {
		t.Errorf("unpin accepted %v after the owner died: before its lease could have expired", moved)
	}
	// At once: the record is B's before any other call.
	if got, ok := b.listed("t1"); !ok || got.HostID != "host-b" {
		t.Errorf("ls right after unpin: %+v (listed %v), want host-b", got, ok)
	}
	if out := b.mustWarren("exec", "--thread", "t1", "--", "cat f"); out != "from a\n" {
		t.Errorf("B after unpin: %q", out)
	}
	a.start()
	if r := a.run(20*time.Second, "exec", "--thread", "t1", "--", "cat f"); r.code != 1 || !strings.Contains(r.stderr, "on the host host-b") {
		t.Errorf("A, restarted, after unpin moved its thread to B: %v", r)
	}
}

// TestHostsJobsAfterMove: jobs do not move with their thread. The new
// owner notes, exactly once, that a job the dead owner left running was
// stopped (it confirms that on one machine), in the store and on its
// event stream; a second call or a restart adds no second note.
func TestHostsJobsAfterMove(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	b := c.host("host-b")
	rootA := a.threadInfo("t1").Root
	if id := strings.TrimSpace(a.mustWarren("spawn", "--thread", "t1", "--", "sleep 300")); id != "bash-1" {
		t.Fatalf("first job: %q", id)
	}
	if id := strings.TrimSpace(a.mustWarren("spawn", "--thread", "t1", "--", "echo quick")); id != "bash-2" {
		t.Fatalf("second job: %q", id)
	}
	for deadline := time.Now().Add(10 * time.Second); !a.jobs("t1")["bash-2"].Ended; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the quick job did not end: %+v", a.jobs("t1"))
		}
	}
	var sleeps []int
	for deadline := time.Now().Add(10 * time.Second); len(sleeps) == 0; time.Sleep(50 * time.Millisecond) {
		sleeps = processesUnder(a.pid(), "sleep", "300")
		if time.Now().After(deadline) {
			t.Fatal("no sleep 300 process under A")
		}
	}

	events := b.subscribe("t1")
	a.kill9()
	if r, _ := waitPastPinned(t, b, "t1", "true", rootA, "host-a"); r.code != 0 {
		t.Fatalf("B after A's lease expired: %v", r)
	}
	notes := func(ev api.Event) bool { return strings.Contains(ev.Message, "Background job bash-1") }
	if _, ok := events.waitFor(5*time.Second, notes); !ok {
		t.Errorf("no note about bash-1 on B's event stream:\n%s", events)
	}
	jobs := b.jobs("t1")
	j1, j2 := jobs["bash-1"], jobs["bash-2"]
	if j1.Running || !j1.Ended || j1.Note != noteStopped || j1.HostID != "host-a" {
		t.Errorf("bash-1 after the move: running %v, ended %v, host %q, note %q; want ended on host-a with %q",
			j1.Running, j1.Ended, j1.HostID, j1.Note, noteStopped)
	}
	if j2.Running || !j2.Ended || j2.Note != "" {
		t.Errorf("bash-2, which ended on its own before the move: running %v, ended %v, note %q", j2.Running, j2.Ended, j2.Note)
	}
	for _, pid := range sleeps {
		if alive(pid) {
			t.Errorf("bash-1's process %d still runs, but its note says it was stopped", pid)
		}
	}

	// A second call, and a restart of B, note nothing again.
	b.mustWarren("exec", "--thread", "t1", "--", "true")
	b.stop()
	b.start()
	events2 := b.subscribe("t1")
	b.mustWarren("exec", "--thread", "t1", "--", "true")
	if id := strings.TrimSpace(b.mustWarren("spawn", "--thread", "t1", "--", "true")); id != "bash-3" {
		t.Errorf("a job on B after the move: %q, want bash-3", id)
	}
	out := b.mustWarren("jobs", "--thread", "t1")
	if n, m := strings.Count(out, noteStopped), strings.Count(out, noteMayStill); n != 1 || m != 0 {
		t.Errorf("warren jobs has %d \"was stopped\" and %d \"may still run\" notes, want 1 and 0:\n%s", n, m, out)
	}
	if j := b.jobs("t1")["bash-3"]; j.HostID != "host-b" {
		t.Errorf("bash-3 has host %q, want host-b", j.HostID)
	}
	if n := events.count(notes); n != 1 {
		t.Errorf("%d notes about bash-1 on B's first event stream, want 1:\n%s", n, events)
	}
	time.Sleep(200 * time.Millisecond)
	if n := events2.count(notes); n != 0 {
		t.Errorf("%d notes about bash-1 on B's event stream after its restart, want 0:\n%s", n, events2)
	}
}

// TestHostsFencing: the owner stops (SIGSTOP) past its lease; another
// server takes the thread; the owner, continued, never serves the thread
// again: it is fenced until it holds a fresh lease, then refuses it as
// pinned to the new owner.
func TestHostsFencing(t *testing.T) {
	c := newHostCluster(t)
	a := c.host("host-a")
	b := c.host("host-b")
	mp := a.bind("default", "t1")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("from a\n"), 0o644))
	rootA := a.threadInfo("t1").Root
	ca := a.client()
	if out, code, err := execAPI(ca, 20*time.Second, "t1", "cat f"); err != nil || code != 0 || out != "from a\n" {
		t.Fatalf("A before the stop: %q, %d, %v", out, code, err)
	}
	// A runs a command and a job that write in the thread every 100 ms.
	execDone := make(chan error, 1)
	go func() {
		out, code, err := execAPI(ca, 60*time.Second, "t1", "while :; do echo a >> ticks; sleep 0.1; done")
		if err == nil {
			err = fmt.Errorf("exit %d, output %q", code, out)
		}
		execDone <- err
	}()
	if id := strings.TrimSpace(a.mustWarren("spawn", "--thread", "t1", "--", "while :; do echo j >> jticks; sleep 0.1; done")); id != "bash-1" {
		t.Fatalf("job on A: %q", id)
	}
	lines := func(name string) int {
		data, _ := os.ReadFile(filepath.Join(rootA, name))
		return strings.Count(string(data), "\n")
	}
	for deadline := time.Now().Add(10 * time.Second); lines("ticks") < 2 || lines("jticks") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("A's command and job do not write: %d and %d lines", lines("ticks"), lines("jticks"))
		}
	}

	stopped := time.Now()
	a.pause()
	r, took := waitPastPinned(t, b, "t1", "echo from b > g; cat f g", rootA, "host-a")
	if r.code != 0 || r.stdout != "from a\nfrom b\n" {
		t.Fatalf("B while A is stopped past its lease: %v", r)
	}
	if j := b.jobs("t1")["bash-1"]; j.Running || j.Note != noteStopped {
		t.Errorf("A's job after B took the thread: running %v, note %q; want %q", j.Running, j.Note, noteStopped)
	}
	t.Logf("B took the thread %v after A stopped", took.Sub(stopped).Round(time.Millisecond))
	if took.Sub(stopped) < earliestTakeover {
		t.Errorf("B took the thread %v after A stopped: before A's lease could have expired", took.Sub(stopped))
	}
	a.resume()
	resumed := time.Now()

	// Every call to A is refused, as fenced or as B's; once A renewed,
	// as B's.
	var fenced, pinned int
	lastFenced := resumed
	for time.Since(resumed) < 3*time.Second || pinned < 5 {
		if time.Since(resumed) > 20*time.Second {
			t.Fatalf("A, continued, is not refusing as pinned to host-b within 20s (fenced %d, pinned %d)", fenced, pinned)
		}
		out, code, err := execAPI(ca, 10*time.Second, "t1", "echo from a again >> f; cat f")
		e := apiError(err)
		switch {
		case err == nil:
			t.Fatalf("A, continued, served the thread B took: exit %d, %q", code, out)
		case e != nil && e.Status == http.StatusServiceUnavailable && e.Code == "fenced":
			fenced++
			lastFenced = time.Now()
			if pinned > 0 {
				t.Errorf("A refused as fenced after it had refused as pinned: %v", err)
			}
		case e != nil && e.Status == http.StatusConflict && e.Code == "pinned" && strings.Contains(e.Message, "on the host host-b"):
			pinned++
		default:
			t.Fatalf("A, continued: %v; want 503 fenced or 409 pinned naming host-b", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("A, continued: %d calls refused as fenced (for %v), %d as pinned to host-b",
		fenced, lastFenced.Sub(resumed).Round(time.Millisecond), pinned)
	if h := b.hosts()["host-a"]; !h.Alive {
		t.Errorf("host-a did not come back with a fresh lease: %+v", h)
	}
	// The other calls too, and the CLI.
	for _, c := range threadCalls(ca, "t1", true) {
		err := c.call()
		if e := apiError(err); e == nil || e.Status != http.StatusConflict || e.Code != "pinned" || !strings.Contains(e.Message, "on the host host-b") {
			t.Errorf("A, renewed: API %s: %v, want 409 pinned naming host-b", c.name, err)
		}
	}
	if out := b.mustWarren("exec", "--thread", "t1", "--", "cat f g"); out != "from a\nfrom b\n" {
		t.Errorf("the thread's files after A was continued: %q", out)
	}
	// A's mount does not serve the thread any more: a write through it
	// does not reach the thread's folder (the mount may refuse it, or be
	// gone, the write landing in the bare mount point).
	werr := os.WriteFile(filepath.Join(mp, "via-a"), []byte("a\n"), 0o644)
	if _, err := os.Stat(filepath.Join(rootA, "via-a")); err == nil {
		t.Errorf("a write through A's mount %s reached the thread's folder after B took it and A renewed its lease (write: %v)", mp, werr)
	}
	// Nothing of A goes on writing in the thread B holds: its command
	// ended, and the files it and its job wrote stay as they are.
	select {
	case err := <-execDone:
		t.Logf("A's command ended: %v", err)
	case <-time.After(2 * time.Second):
		t.Errorf("A's command, started before its lease lapsed, still runs %v after A was continued, in the thread B took", time.Since(resumed).Round(time.Millisecond))
	}
	n, jn := lines("ticks"), lines("jticks")
	time.Sleep(time.Second)
	if n2, jn2 := lines("ticks"), lines("jticks"); n2 != n || jn2 != jn {
		t.Errorf("A writes in the thread B took, %v after A was continued: ticks %d → %d lines, jticks %d → %d in a second",
			time.Since(resumed).Round(time.Millisecond), n, n2, jn, jn2)
	}
	if got, ok := b.listed("t1"); !ok || got.HostID != "host-b" {
		t.Errorf("ls: %+v (listed %v), want host-b", got, ok)
	}
}

// TestHostsEtcdMemberKilled: with A and B serving, etcd's leader is
// killed, and restarted a few seconds later. Every call on both servers is
// answered within a few seconds, by a success or a proper refusal (never
// a 500), and both serve their threads again while the member is down.
func TestHostsEtcdMemberKilled(t *testing.T) {
	c := newHostCluster(t)
	servers := map[string]*daemon{"host-a": c.host("host-a"), "host-b": c.host("host-b")}
	for id, d := range servers {
		d.bind("default", id+"-base")
	}
	const hang = 5 * time.Second

	type result struct {
		server, call string
		start        time.Time
		took         time.Duration
		err          error
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id, d := range servers {
		other := "host-a-base"
		if id == "host-a" {
			other = "host-b-base"
		}
		cl := d.client()
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				thread := fmt.Sprintf("%s-%d", id, n)
				call := func(name string, fn func(ctx context.Context) error) {
					ctx, cancel := context.WithTimeout(context.Background(), 3*hang)
					defer cancel()
					start := time.Now()
					err := fn(ctx)
					mu.Lock()
					results = append(results, result{id, name, start, time.Since(start), err})
					mu.Unlock()
				}
				call("bind "+thread, func(ctx context.Context) error { _, err := cl.Bind(ctx, "", thread); return err })
				for _, th := range []string{thread, id + "-base", other} {
					call("exec "+th, func(ctx context.Context) error {
						var out strings.Builder
						code, err := cl.Exec(ctx, "", th, api.ExecRequest{Command: "echo ok"}, &out, nil)
						if err == nil && (code != 0 || out.String() != "ok\n") {
							err = fmt.Errorf("exit %d, output %q", code, out.String())
						}
						return err
					})
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	leader := etcdLeader(t, c.etcd)
	killed := time.Now()
	c.etcd.Kill(t, leader)
	time.Sleep(6 * time.Second)
	restarted := time.Now()
	c.etcd.Restart(t, leader)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var worst result
	// How many calls each server served on its own threads while the
	// member was down: the two left keep a quorum.
	servedDown := map[string]int{}
	refused := 0
	for _, r := range results {
		if r.took > worst.took {
			worst = r
		}
		if r.took > hang {
			t.Errorf("%s: %s took %v (started %v after the kill): %v", r.server, r.call, r.took, r.start.Sub(killed).Round(time.Millisecond), r.err)
		}
		e := apiError(r.err)
		switch {
		case r.err == nil:
			own := strings.HasPrefix(strings.Fields(r.call)[1], r.server+"-")
			if own && r.start.After(killed) && r.start.Add(r.took).Before(restarted) {
				servedDown[r.server]++
			}
		case e != nil && (e.Status == http.StatusConflict && e.Code == "pinned" || e.Status == http.StatusServiceUnavailable):
			refused++
		default:
			t.Errorf("%s: %s (started %v after the kill, took %v): %v; want a success or a proper refusal",
				r.server, r.call, r.start.Sub(killed).Round(time.Millisecond), r.took, r.err)
		}
	}
	t.Logf("%d calls, %d refused (pinned or unavailable); the slowest: %s on %s, %v, started %v after the kill of etcd member %d",
		len(results), refused, worst.call, worst.server, worst.took.Round(time.Millisecond), worst.start.Sub(killed).Round(time.Millisecond), leader)
	for id := range servers {
		if servedDown[id] == 0 {
			t.Errorf("%s served none of its threads while the etcd member was down", id)
		}
	}
	if refused == 0 {
		t.Errorf("no call was refused: the cross-server calls should have been refused as pinned")
	}
}

// TestHostsNeverTwoOwners kills the owner of a thread, A and B in turn,
// and starts it again, while a client calls both all the time. A server
// serves the thread only after the other died and its lease could have
// expired: successes of the two never interleave.
func TestHostsNeverTwoOwners(t *testing.T) {
	c := newHostCluster(t)
	servers := map[string]*daemon{"host-a": c.host("host-a"), "host-b": c.host("host-b")}
	mp := servers["host-a"].bind("default", "t1")
	must(t, os.WriteFile(filepath.Join(mp, "f"), []byte("x\n"), 0o644))

	type call struct {
		server     string
		start, end time.Time
		ok         bool
		err        error
	}
	var mu sync.Mutex
	var calls []call
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id, d := range servers {
		cl := client.New(d.socket)
		defer cl.CloseIdleConnections()
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				out, code, err := execAPI(cl, 10*time.Second, "t1", "cat f")
				ok := err == nil && code == 0 && out == "x\n"
				if err == nil && !ok {
					err = fmt.Errorf("exit %d, output %q", code, out)
				}
				mu.Lock()
				calls = append(calls, call{id, start, time.Now(), ok, err})
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	servedSince := func(id string, since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			if c.server == id && c.ok && c.end.After(since) {
				return true
			}
		}
		return false
	}

	kills := map[string][]time.Time{}
	owner, other := "host-a", "host-b"
	const rounds = 6
	begin := time.Now()
	for round := range rounds {
		if !servedSince(owner, time.Now().Add(-time.Second)) {
			for deadline := time.Now().Add(10 * time.Second); !servedSince(owner, time.Now().Add(-time.Second)); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("round %d: %s, the owner, serves no call", round, owner)
				}
			}
		}
		k := time.Now()
		servers[owner].kill9()
		kills[owner] = append(kills[owner], k)
		for deadline := k.Add(15 * time.Second); !servedSince(other, k); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s did not take the thread over within 15s of %s's kill", round, other, owner)
			}
		}
		servers[owner].start()
		time.Sleep(300 * time.Millisecond)
		owner, other = other, owner
	}
	close(stop)
	wg.Wait()
	t.Logf("%d rounds in %v", rounds, time.Since(begin).Round(100*time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	var ok []call
	bad := 0
	for _, c := range calls {
		if c.ok {
			ok = append(ok, c)
			continue
		}
		if e := apiError(c.err); e != nil && e.Status == http.StatusInternalServerError {
			bad++
			if bad <= 5 {
				t.Errorf("%s: 500 at %v: %v", c.server, c.start.Sub(begin).Round(time.Millisecond), c.err)
			}
		}
	}
	slices.SortFunc(ok, func(x, y call) int { return x.end.Compare(y.end) })
	// A change of the server that serves must follow a kill of the one
	// that served before, made after its last call started, and come late
	// enough after that kill for its lease to have expired. Half the
	// lease is a loose bound, safe against a late heartbeat; a server
	// that served while the other lived would break it.
	minGap := expiresAfter / 2
	switches := 0
	for i := 1; i < len(ok); i++ {
		x, y := ok[i-1], ok[i]
		if x.server == y.server {
			continue
		}
		switches++
		legit := false
		for _, k := range kills[x.server] {
			if !k.Before(x.start) && !y.end.Before(k.Add(minGap)) {
				legit = true
			}
		}
		if !legit {
			t.Errorf("two owners: %s served a call [%v, %v], then %s one [%v, %v], with no kill of %s at least %v before the second ended (kills of %s: %v)",
				x.server, x.start.Sub(begin), x.end.Sub(begin), y.server, y.start.Sub(begin), y.end.Sub(begin),
				x.server, minGap, x.server, offsets(kills[x.server], begin))
		}
	}
	t.Logf("%d calls, %d served, %d changes of the serving server, kills at %v (host-a) and %v (host-b)",
		len(calls), len(ok), switches, offsets(kills["host-a"], begin), offsets(kills["host-b"], begin))
	if switches < rounds {
		t.Errorf("%d changes of the serving server, want at least %d (one per round)", switches, rounds)
	}
}

// offsets gives times as durations since begin, for messages.
func offsets(ts []time.Time, begin time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range ts {
		out = append(out, t.Sub(begin).Round(time.Millisecond))
	}
	return out
}
