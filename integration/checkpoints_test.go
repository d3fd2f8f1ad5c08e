package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
)

// The checkpoint tests: checkpoints of a thread's workspace taken, listed,
// compared and restored through a real daemon, and the workspace compared
// whole (content, modes, links, empty folders) with what it held.

// treeState is a workspace as a person sees it: each path's kind, mode,
// and content (a file's hash, a link's target).
type treeState map[string]string

// captureTree walks root (a mount path) without following links.
func captureTree(t *testing.T, root string) treeState {
	t.Helper()
	st := treeState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case rel == ".":
			return nil
		case mode.IsDir():
			st[rel] = fmt.Sprintf("dir %o", mode.Perm()|mode&(fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			st[rel] = "link " + target
		case mode.IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			st[rel] = fmt.Sprintf("file %o %d %s", mode.Perm(), len(b), hex.EncodeToString(sum[:8]))
		default:
			st[rel] = "other " + mode.String()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return st
}

// diffStates says how got differs from want, "" if it does not.
func diffStates(got, want treeState) string {
	var out []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			out = append(out, fmt.Sprintf("missing %s (%s)", p, w))
		} else if g != w {
			out = append(out, fmt.Sprintf("%s: got %s, want %s", p, g, w))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("extra %s (%s)", p, g))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// wantTree fails the test unless the workspace at mp holds want.
func wantTree(t *testing.T, what, mp string, want treeState) {
	t.Helper()
	if d := diffStates(captureTree(t, mp), want); d != "" {
		t.Fatalf("%s: the workspace differs from what it held:\n%s", what, d)
	}
}

// TestCheckpointRoundTrip: checkpoint, change, undo, redo and revert, each
// compared with the whole tree it must give back: files with their
// content and modes, links, folders, empty ones too.
func TestCheckpointRoundTrip(t *testing.T) {
	d := newDaemon(t)
	mp := d.bind("acme", "turns")
	ex := func(script string) {
		t.Helper()
		d.mustWarren("exec", "--tenant", "acme", "--thread", "turns", "--", script)
	}
	ex(`mkdir -p src/deep/er empty/inner bin && printf 'package main\n' > src/main.go &&
		printf 'x\n' > src/deep/er/leaf && head -c 100000 /dev/urandom > blob.bin &&
		printf '#!/bin/sh\necho hi\n' > bin/run && chmod 755 bin/run && chmod 600 src/main.go &&
		ln -s ../src/main.go bin/main-link && ln -s dangling bin/nowhere && : > zero &&
		chmod 2750 empty && seq 1 20000 > big.txt`)
	s1 := captureTree(t, mp)
	out := d.mustWarren("checkpoint", "--tenant", "acme", "--thread", "turns", "--label", "turn 1", "--turn", "1")
	if !strings.HasPrefix(out, "cp-1 ") {
		t.Fatalf("checkpoint: %q, want cp-1", out)
	}

	ex(`printf 'package main\nfunc main() {}\n' > src/main.go && rm -r src/deep && mkdir -p new/empty &&
		printf 'n\n' > new/file && chmod 700 bin/run && rm zero && mkdir zero && ln -sfn ../blob.bin bin/main-link &&
		sed -i 's/^100$/one hundred/' big.txt && rm -r empty/inner`)
	s2 := captureTree(t, mp)
	if diffStates(s1, s2) == "" {
		t.Fatal("the changes changed nothing")
	}
	d.mustWarren("checkpoint", "--tenant", "acme", "--thread", "turns", "--label", "turn 2")

	ex(`rm -r bin && printf 'three\n' > three && chmod 644 src/main.go && mv new renamed`)
	s3 := captureTree(t, mp)

	c := d.client()
	ctx := context.Background()
	u, err := c.History().Undo(ctx, "acme", "turns", false)
	if err != nil {
		t.Fatal(err)
	}
	if u.To != "cp-2" || u.Saved != "cp-3" || len(u.Changed) == 0 {
		t.Fatalf("undo with changes since cp-2: %+v, want cp-2 with the changes saved in cp-3", u)
	}
	wantTree(t, "after an undo of uncheckpointed changes", mp, s2)
	if u, err = c.History().Undo(ctx, "acme", "turns", false); err != nil || u.To != "cp-1" || u.Saved != "" {
		t.Fatalf("second undo: %+v, %v; want cp-1", u, err)
	}
	wantTree(t, "after a second undo", mp, s1)
	if _, err := c.History().Undo(ctx, "acme", "turns", false); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("undo past the first checkpoint: %v, want a conflict", err)
	}
	if u, err = c.History().Redo(ctx, "acme", "turns", false); err != nil || u.To != "cp-2" {
		t.Fatalf("redo: %+v, %v; want cp-2", u, err)
	}
	wantTree(t, "after a redo", mp, s2)
	if u, err = c.History().Redo(ctx, "acme", "turns", false); err != nil || u.To != "cp-3" {
		t.Fatalf("second redo: %+v, %v; want cp-3", u, err)
	}
	wantTree(t, "after a second redo", mp, s3)
	if _, err := c.History().Redo(ctx, "acme", "turns", false); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("redo with nothing undone: %v, want a conflict", err)
	}

	list, err := c.History().Checkpoints(ctx, "acme", "turns")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Checkpoints) != 3 || list.Head != "cp-3" || !list.Checkpoints[2].Auto || list.Checkpoints[0].Label != "turn 1" || list.Checkpoints[0].Turn != 1 {
		t.Fatalf("checkpoints: %+v", list)
	}

	// What changed between the first two, with the text of the changes.
	df, err := c.History().Diff(ctx, "acme", "turns", "cp-1", "cp-2", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"new", "new/empty", "new/file"} {
		if !slices.Contains(df.Added, want) {
			t.Errorf("diff: added %v lacks %s", df.Added, want)
		}
	}
	for _, want := range []string{"src/deep", "src/deep/er/leaf", "empty/inner"} {
		if !slices.Contains(df.Removed, want) {
			t.Errorf("diff: removed %v lacks %s", df.Removed, want)
		}
	}
	for _, want := range []string{"src/main.go", "bin/run", "big.txt", "bin/main-link"} {
		if !slices.Contains(df.Modified, want) {
			t.Errorf("diff: modified %v lacks %s", df.Modified, want)
		}
	}
	var bigDiff string
	for _, fd := range df.Diffs {
		if fd.Path == "big.txt" {
			bigDiff = fd.Diff
		}
	}
	if !strings.Contains(bigDiff, "-100\n") || !strings.Contains(bigDiff, "+one hundred\n") {
		t.Errorf("text diff of big.txt: %q", bigDiff)
	}
	// And since the head: nothing.
	if df, err := c.History().Diff(ctx, "acme", "turns", "", "now", false); err != nil || len(df.Added)+len(df.Removed)+len(df.Modified) != 0 {
		t.Fatalf("diff since the head of an unchanged workspace: %+v, %v", df, err)
	}

	out = d.mustWarren("revert", "--tenant", "acme", "--thread", "turns", "cp-1")
	if !strings.Contains(out, "revert: at cp-1") {
		t.Fatalf("revert: %q", out)
	}
	wantTree(t, "after a revert", mp, s1)

	// The checkpoints and the position outlive a restart.
	d.stop()
	d.start()
	wantTree(t, "after a restart", mp, s1)
	if u, err = c.History().Redo(ctx, "acme", "turns", false); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("redo after a revert: %+v, %v; want nothing to redo", u, err)
	}
	if u, err = c.History().Revert(ctx, "acme", "turns", "cp-3", false); err != nil {
		t.Fatal(err)
	}
	wantTree(t, "after a revert following a restart", mp, s3)
	if _, err := c.History().Revert(ctx, "acme", "turns", "cp-9", false); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("revert to a checkpoint that is not there: %v", err)
	}
}

// TestCheckpointStaleAndFork: a restore moves the versions of what it
// changed, so a write based on a read made before it is refused; a fork
// starts a new thread at a checkpoint.
func TestCheckpointStaleAndFork(t *testing.T) {
	d := newDaemon(t)
	c := d.client()
	ctx := context.Background()
	mp := d.bind("", "orig")
	if _, err := c.Files().Write(ctx, "", "orig", api.WriteFileRequest{Path: "app.ts", Run: "lead", Content: "v1\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.History().Checkpoint(ctx, "", "orig", api.CheckpointRequest{Label: "v1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files().Write(ctx, "", "orig", api.WriteFileRequest{Path: "app.ts", Run: "lead", Content: "v2\n"}); err != nil {
		t.Fatal(err)
	}
	v2 := captureTree(t, mp)
	if _, err := c.History().Checkpoint(ctx, "", "orig", api.CheckpointRequest{Label: "v2"}); err != nil {
		t.Fatal(err)
	}
	// sub reads v2; the undo puts v1 back.
	if _, err := c.Files().Read(ctx, "", "orig", api.ReadFileRequest{Path: "app.ts", Run: "sub"}); err != nil {
		t.Fatal(err)
	}
	events := d.subscribe("orig")
	if _, err := c.History().Undo(ctx, "", "orig", false); err != nil {
		t.Fatal(err)
	}
	if ev, ok := events.waitFor(10*time.Second, func(ev api.Event) bool { return ev.Type == api.EventThreadRestored }); !ok ||
		ev.Checkpoint != "cp-1" || ev.Op != "undo" || !slices.Contains(ev.Paths, "app.ts") {
		t.Fatalf("thread.restored: %+v (found %v); events %s", ev, ok, events)
	}
	_, err := c.Files().Write(ctx, "", "orig", api.WriteFileRequest{Path: "app.ts", Run: "sub", Content: "mine\n"})
	if !errors.Is(err, api.ErrStale) || !strings.Contains(err.Error(), "app.ts changed since it was read. Read it again before you edit it.") {
		t.Fatalf("a write based on a read from before the restore: %v, want the stale refusal", err)
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "app.ts")); string(got) != "v1\n" {
		t.Fatalf("after the refused write: %q", got)
	}
	// Through the mount, in the jail, too: a command that read before.
	// (The read above is the file API's; sub reads again and writes.)
	if r, err := c.Files().Read(ctx, "", "orig", api.ReadFileRequest{Path: "app.ts", Run: "sub"}); err != nil || r.Content != "v1\n" {
		t.Fatalf("read again: %+v %v", r, err)
	}
	if _, err := c.Files().Write(ctx, "", "orig", api.WriteFileRequest{Path: "app.ts", Run: "sub", Content: "mine\n"}); err != nil {
		t.Fatalf("a write after a fresh read: %v", err)
	}

	f, err := c.History().Fork(ctx, "", "orig", api.ForkRequest{Checkpoint: "cp-2", Thread: "copy"})
	if err != nil {
		t.Fatal(err)
	}
	if f.Checkpoint != "cp-1" || f.From != "cp-2" || f.Binding.Thread != "copy" {
		t.Fatalf("fork: %+v", f)
	}
	wantTree(t, "the fork", f.MountPath, v2)
	if out := d.mustWarren("exec", "--thread", "copy", "--", "cat app.ts"); out != "v2\n" {
		t.Fatalf("the fork's jail sees %q", out)
	}
	list, err := c.History().Checkpoints(ctx, "", "copy")
	if err != nil || len(list.Checkpoints) != 1 || list.Head != "cp-1" || !strings.Contains(list.Checkpoints[0].Label, "cp-2") {
		t.Fatalf("the fork's checkpoints: %+v %v", list, err)
	}
	if _, err := c.History().Fork(ctx, "", "orig", api.ForkRequest{Thread: "copy"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("a fork into a thread that exists: %v", err)
	}
	// The two threads go their own ways.
	if _, err := c.Files().Write(ctx, "", "copy", api.WriteFileRequest{Path: "app.ts", Content: "copy\n"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(mp, "app.ts")); string(got) != "mine\n" {
		t.Fatalf("the fork's write reached its source: %q", got)
	}
	// A fork made up its own id when given none.
	f2, err := c.History().Fork(ctx, "", "orig", api.ForkRequest{})
	if err != nil || !strings.HasPrefix(f2.Binding.Thread, "orig-fork-") {
		t.Fatalf("fork without an id: %+v %v", f2, err)
	}
	// Deleting a thread drops its checkpoints; the other threads' stay.
	d.mustWarren("delete", "--thread", "orig")
	if _, err := c.History().Checkpoints(ctx, "", "orig"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("checkpoints of a deleted thread: %v", err)
	}
	if _, err := c.History().Revert(ctx, "", "copy", "cp-1", false); err != nil {
		t.Fatalf("revert of the fork after its source was deleted: %v", err)
	}
	wantTree(t, "the fork, reverted after its source went", f.MountPath, v2)
}

// TestRestoreWhileCommandsRun: a restore is refused while a job or a
// command of the thread runs, and force stops them first, with the note a
// job gets.
func TestRestoreWhileCommandsRun(t *testing.T) {
	d := newDaemon(t)
	c := d.client()
	ctx := context.Background()
	d.bind("", "busy")
	d.mustWarren("exec", "--thread", "busy", "--", "echo one > f")
	d.mustWarren("checkpoint", "--thread", "busy")
	d.mustWarren("exec", "--thread", "busy", "--", "echo two > f")
	job, err := c.Spawn(ctx, "", "busy", api.SpawnRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.History().Undo(ctx, "", "busy", false)
	if !errors.Is(err, api.ErrBusy) || !strings.Contains(err.Error(), job.ID) {
		t.Fatalf("undo while a job runs: %v, want busy naming %s", err, job.ID)
	}
	if out := d.mustWarren("exec", "--thread", "busy", "--", "cat f"); out != "two\n" {
		t.Fatalf("a refused undo changed the workspace: %q", out)
	}
	u, err := c.History().Undo(ctx, "", "busy", true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(u.Stopped, job.ID) || u.To != "cp-1" {
		t.Fatalf("undo with force: %+v, want %s stopped", u, job.ID)
	}
	info, err := c.Job(ctx, "", "busy", job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Running || info.ExitCode == nil || *info.ExitCode != 137 || !strings.Contains(info.Note, "the workspace was restored (undo to cp-1)") {
		t.Fatalf("the job after a forced undo: %+v", info)
	}
	if out := d.mustWarren("exec", "--thread", "busy", "--", "cat f"); out != "one\n" {
		t.Fatalf("after a forced undo: %q", out)
	}

	// A foreground command counts too.
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "", "busy", api.ExecRequest{Command: "echo started; sleep 600"}, nil,
			writerFunc(func([]byte) { once.Do(func() { close(started) }) }), io.Discard)
		done <- err
	}()
	<-started
	if _, err := c.History().Revert(ctx, "", "busy", "cp-1", false); !errors.Is(err, api.ErrBusy) || !strings.Contains(err.Error(), "exec-") {
		t.Fatalf("revert while a command runs: %v, want busy", err)
	}
	if u, err := c.History().Revert(ctx, "", "busy", "cp-1", true); err != nil || len(u.Stopped) != 1 {
		t.Fatalf("revert with force while a command runs: %+v, %v", u, err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the command a forced revert stopped still runs")
	}
}

// writerFunc is an io.Writer that calls f with each write.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) {
	if f != nil {
		f(p)
	}
	return len(p), nil
}

// TestRestoreKilledMidway: a daemon killed with SIGKILL in the middle of a
// restore finishes it at its next start: the workspace is the checkpoint's
// whole, never half old and half new.
func TestRestoreKilledMidway(t *testing.T) {
	d := newDaemon(t)
	c := d.client()
	ctx := context.Background()
	mp := d.bind("", "crash")
	// Many files, so that the restore takes a while: the kill lands in
	// its middle (checked below, tried again if not).
	d.mustWarren("exec", "--thread", "crash", "--", restoreLoad("old"))
	old := captureTree(t, mp)
	d.mustWarren("checkpoint", "--thread", "crash", "--label", "old")
	for try := 1; ; try++ {
		d.mustWarren("exec", "--thread", "crash", "--", restoreLoad(fmt.Sprint("new ", try)))
		newer := captureTree(t, mp)
		d.mustWarren("checkpoint", "--thread", "crash", "--label", fmt.Sprint("new ", try))
		// The revert writes 4000 files; the kill comes once the first is
		// written, while the rest are not.
		first := filepath.Join(d.data, "workspaces")
		pid := d.pid()
		var wg sync.WaitGroup
		wg.Go(func() { c.History().Revert(ctx, "", "crash", "cp-1", false) })
		mid := waitRestoreStarted(t, first, "old 1\n")
		syscall.Kill(pid, syscall.SIGKILL)
		d.kill9()
		wg.Wait()
		if !mid {
			t.Logf("try %d: the restore ended before the kill; again", try)
			if try == 5 {
				t.Fatal("the restore always ended before the kill")
			}
			continue
		}
		// The kill landed in the middle: the backing folder holds some
		// old files and some new ones.
		d.start()
		wantTree(t, "after a restart that finished a restore a kill cut short", mp, old)
		list, err := c.History().Checkpoints(ctx, "", "crash")
		if err != nil || list.Head != "cp-1" {
			t.Fatalf("checkpoints after the restart: %+v %v", list, err)
		}
		if !strings.Contains(d.allLogs(), "finishing a restore that was cut short") {
			t.Errorf("the restart did not say it finished a restore")
		}
		_ = newer
		return
	}
}

// TestRestoreOutlivesItsCaller: a client that gives up on a revert in its
// middle does not cut the restore short: the daemon finishes it at once,
// and says so on the event stream, without any later call finishing a
// journaled restore.
func TestRestoreOutlivesItsCaller(t *testing.T) {
	d := newDaemon(t)
	c := d.client()
	mp := d.bind("", "t1")
	d.mustWarren("exec", "--thread", "t1", "--", restoreLoad("old"))
	old := captureTree(t, mp)
	d.mustWarren("checkpoint", "--thread", "t1")
	for try := 1; ; try++ {
		d.mustWarren("exec", "--thread", "t1", "--", restoreLoad(fmt.Sprint("new ", try)))
		d.mustWarren("checkpoint", "--thread", "t1")
		events := d.subscribe("t1")
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := c.History().Revert(ctx, "", "t1", "cp-1", false)
			errc <- err
		}()
		mid := waitRestoreStarted(t, filepath.Join(d.data, "workspaces"), "old 1\n")
		cancel() // the client hangs up
		err := <-errc
		ev, ok := events.waitFor(time.Minute, func(ev api.Event) bool { return ev.Type == api.EventThreadRestored })
		if !ok || ev.Checkpoint != "cp-1" || ev.Op != "revert" {
			t.Fatalf("thread.restored after the client hung up (revert: %v): %+v (found %v); events %s", err, ev, ok, events)
		}
		if !mid || err == nil {
			// The revert ended before the hang-up: nothing shown; again.
			if try == 5 {
				t.Fatal("the revert always ended before its client hung up")
			}
			d.mustWarren("revert", "--thread", "t1", fmt.Sprint("cp-", 2*try))
			continue
		}
		wantTree(t, "the workspace once the restore its client left ended", mp, old)
		if strings.Contains(d.allLogs(), "finishing a restore that was cut short") {
			t.Error("the restore was cut short and finished by a later call, not run to its end")
		}
		list, err := c.History().Checkpoints(context.Background(), "", "t1")
		if err != nil || list.Head != "cp-1" {
			t.Fatalf("checkpoints after the restore: %+v %v", list, err)
		}
		return
	}
}

// restoreLoad is the command that makes a workspace's a/f1 to a/f4000
// hold "<text> <i>": enough files that a restore of them takes a while,
// as waitRestoreStarted expects.
func restoreLoad(text string) string {
	return fmt.Sprintf(`mkdir -p a && cd a && for i in $(seq 1 4000); do echo "%s $i" > f$i; done`, text)
}

// waitRestoreStarted waits until a file under dir holds content (the
// restore wrote its first file) and reports whether other files still
// hold something else (the restore is not done).
func waitRestoreStarted(t *testing.T, dir, content string) bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	matches, _ := filepath.Glob(filepath.Join(dir, "*", "*", "a", "f1"))
	if len(matches) != 1 {
		t.Fatalf("the workspace's f1 under %s: %v", dir, matches)
	}
	ws := filepath.Dir(matches[0])
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(ws, "f1")); err == nil && string(b) == content {
			b, err := os.ReadFile(filepath.Join(ws, "f4000"))
			return err == nil && string(b) != "old 4000\n"
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("the restore did not start within 30 s")
	return false
}

// TestCheckpointsCollectedSafely: threads of one tenant take checkpoints
// all the time, keeping only two each, and threads are deleted, so that
// collections of unreferenced objects run while checkpoints are taken;
// every checkpoint kept still restores what it recorded.
func TestCheckpointsCollectedSafely(t *testing.T) {
	d := newDaemon(t, "--checkpoints", "2")
	c := d.client()
	ctx := context.Background()
	const threads, rounds = 3, 12
	recorded := make([]map[string]treeState, threads)
	mps := make([]string, threads)
	for i := range threads {
		mps[i] = d.bind("gc", fmt.Sprint("t", i))
		recorded[i] = map[string]treeState{}
	}
	var wg sync.WaitGroup
	errs := make(chan error, threads*rounds+rounds)
	for i := range threads {
		wg.Go(func() {
			thread := fmt.Sprint("t", i)
			for r := range rounds {
				// Shared content (deduplicated between threads) and
				// content of its own.
				script := fmt.Sprintf(`seq 1 %d > shared-%d && echo %d-%d > own && mkdir -p d%d && echo x > d%d/f`, 1000+r, r%3, i, r, r, r)
				if _, err := d.warren("exec", "--tenant", "gc", "--thread", thread, "--", script); err != nil {
					errs <- err
					return
				}
				st := captureTree(t, mps[i])
				cp, err := c.History().Checkpoint(ctx, "gc", thread, api.CheckpointRequest{})
				if err != nil {
					errs <- err
					return
				}
				recorded[i][cp.Checkpoint.ID] = st
			}
		})
	}
	// Threads made and deleted meanwhile: each delete collects.
	wg.Go(func() {
		for r := range rounds {
			thread := fmt.Sprint("tmp", r)
			if _, err := c.Bind(ctx, "gc", thread); err != nil {
				errs <- err
				return
			}
			if _, err := c.Files().Write(ctx, "gc", thread, api.WriteFileRequest{Path: "x", Content: strings.Repeat("y", r)}); err != nil {
				errs <- err
				return
			}
			if _, err := c.History().Checkpoint(ctx, "gc", thread, api.CheckpointRequest{}); err != nil {
				errs <- err
				return
			}
			if err := c.DeleteThread(ctx, "gc", thread); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !strings.Contains(d.allLogs(), "collected unreferenced snapshot objects") {
		t.Error("no collection ran")
	}
	for i := range threads {
		thread := fmt.Sprint("t", i)
		list, err := c.History().Checkpoints(ctx, "gc", thread)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Checkpoints) != 2 {
			t.Errorf("%s keeps %d checkpoints, want 2", thread, len(list.Checkpoints))
		}
		for _, cp := range list.Checkpoints {
			if _, err := c.History().Revert(ctx, "gc", thread, cp.ID, false); err != nil {
				t.Fatalf("%s: revert to %s: %v", thread, cp.ID, err)
			}
			wantTree(t, fmt.Sprintf("%s at %s", thread, cp.ID), mps[i], recorded[i][cp.ID])
		}
	}
}
