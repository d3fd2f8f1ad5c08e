package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// changesOf opens the file API of backing on hub, for its change log.
func changesOf(t *testing.T, hub *Hub, backing string) *Files {
	t.Helper()
	f, err := hub.Files(backing, "test/thread", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// settleWriters waits until no handle that may write is open on the hub.
// The kernel sends a handle's RELEASE after close(2) has returned, and a
// release marks its file again (for writes a checkpoint read mid-way), so
// a set taken before the last command's releases arrive would see them
// land in the next one.
func settleWriters(t *testing.T, hub *Hub) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hub.writing.mu.Lock()
		open := len(hub.writing.by)
		hub.writing.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inodes still have a handle open for writing after 10s", open)
		}
		time.Sleep(time.Millisecond)
	}
}

// takeMap takes the change set as path → tree, and says whether it was
// complete, once the writers' releases are in.
func takeMap(t *testing.T, f *Files) (map[string]bool, bool) {
	t.Helper()
	settleWriters(t, f.hub)
	cs := f.TakeChanges()
	m := make(map[string]bool)
	for _, c := range cs.Changes {
		m[c.Path] = c.Tree
	}
	return m, cs.Complete
}

func wantChanges(t *testing.T, f *Files, want map[string]bool) {
	t.Helper()
	got, complete := takeMap(t, f)
	if !complete {
		t.Fatalf("the change set is not complete; want %v", want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes: got %v, want %v", got, want)
	}
}

// TestChangesThroughMounts: every change made through either mount of a
// folder or through its file API is in the folder's change set, at the
// path where it was made; a change behind the filesystem's back is there
// once the filesystem next opens the path.
func TestChangesThroughMounts(t *testing.T) {
	ctx := context.Background()
	hub, backing, a, b, _ := sharedMounts(t, HubConfig{})
	f := changesOf(t, hub, backing)
	if _, complete := takeMap(t, f); complete {
		t.Fatal("the first change set of a folder says it is complete; it did not see what came before")
	}
	wantChanges(t, f, map[string]bool{})

	ag := startAgent(t, hub, "r", a)
	for _, line := range []string{
		"mkdir -p d/e", "echo x > d/e/f", "echo y > g", "ln -s g l", "mv d d2",
		"chmod 600 g", "truncate -s 0 g", "rm l",
	} {
		if rc := ag.do(t, line); rc != 0 {
			t.Fatalf("%s: rc %d: %s", line, rc, ag.err)
		}
	}
	wantChanges(t, f, map[string]bool{
		"d": true, "d/e": true, "d/e/f": false, "d2": true, "g": false, "l": false,
	})

	other := startAgent(t, hub, "s", b)
	if rc := other.do(t, "echo z > d2/e/f && mkdir d2/e/h && rmdir d2/e/h"); rc != 0 {
		t.Fatalf("through the other mount: %s", other.err)
	}
	wantChanges(t, f, map[string]bool{"d2/e/f": false, "d2/e/h": true})

	if _, err := f.Write(ctx, RunActor("api"), "d2/new/x", []byte("api\n")); err != nil {
		t.Fatal(err)
	}
	wantChanges(t, f, map[string]bool{"d2/new": true, "d2/new/x": false})

	// The file API follows a link in the folders: the change is marked
	// where the file really is.
	if rc := ag.do(t, "ln -s d2/e via"); rc != 0 {
		t.Fatalf("ln: %s", ag.err)
	}
	wantChanges(t, f, map[string]bool{"via": false})
	if _, err := f.Write(ctx, RunActor("api"), "via/f", []byte("through a link\n")); err != nil {
		t.Fatal(err)
	}
	wantChanges(t, f, map[string]bool{"d2/e/f": false})

	// Behind the filesystem's back, then read through the mount.
	must(t, os.WriteFile(filepath.Join(backing, "g"), []byte("behind\n"), 0o600))
	if rc := ag.do(t, "cat g >/dev/null"); rc != 0 {
		t.Fatalf("cat: %s", ag.err)
	}
	wantChanges(t, f, map[string]bool{"g": false})

	// A file with two names: a change reaches both, so the set cannot
	// say which paths changed.
	if rc := ag.do(t, "ln g hard"); rc != 0 {
		t.Fatalf("ln: %s", ag.err)
	}
	wantChanges(t, f, map[string]bool{"hard": false})
	if rc := ag.do(t, "echo more >> g"); rc != 0 {
		t.Fatalf("append: %s", ag.err)
	}
	if _, complete := takeMap(t, f); complete {
		t.Fatal("a change of a file with two names left the set complete")
	}
	wantChanges(t, f, map[string]bool{})
}

// TestChangeLogTakeCommitReturn: the set's life between checkpoints.
func TestChangeLogTakeCommitReturn(t *testing.T) {
	hub, f, _ := newFiles(t, HubConfig{})
	_ = hub
	f.TakeChanges() // the first set is never complete
	c := f.changes
	c.mark("a", false)
	c.mark("b/c", true)
	c.mark("a", false)
	cs := f.TakeChanges()
	want := []Change{{Path: "a"}, {Path: "b/c", Tree: true}}
	if !cs.Complete || !reflect.DeepEqual(cs.Changes, want) || cs.Base != "" {
		t.Fatalf("got %+v, want complete %v with no base", cs, want)
	}
	// A checkpoint that failed gives its set back: it joins the next.
	c.mark("d", false)
	f.ReturnChanges(cs)
	cs = f.TakeChanges()
	want = []Change{{Path: "a"}, {Path: "b/c", Tree: true}, {Path: "d"}}
	if !cs.Complete || !reflect.DeepEqual(cs.Changes, want) {
		t.Fatalf("after a return: got %+v, want %v", cs, want)
	}
	f.CommitChanges("cp-1")
	if cs := f.TakeChanges(); cs.Base != "cp-1" || len(cs.Changes) != 0 || !cs.Complete {
		t.Fatalf("after a commit: got %+v, want an empty complete set on cp-1", cs)
	}
	// An incomplete set given back leaves the next one incomplete.
	c.lose("test")
	lost := f.TakeChanges()
	if lost.Complete {
		t.Fatal("a lost set says it is complete")
	}
	f.ReturnChanges(lost)
	if cs := f.TakeChanges(); cs.Complete || cs.Why != "test" {
		t.Fatalf("after returning a lost set: got %+v, want it not complete, for test", cs)
	}
	// Past the bound, the set is lost rather than grown.
	for i := range maxChanges + 1 {
		c.mark(fmt.Sprint("f", i), false)
	}
	if cs := f.TakeChanges(); cs.Complete || len(cs.Changes) != 0 {
		t.Fatalf("past the bound: got complete=%v with %d paths, want a lost set", cs.Complete, len(cs.Changes))
	}
}

// TestFreezeHoldsChanges: while Freeze is held, a modification through
// the mount waits; it goes on once thawed.
func TestFreezeHoldsChanges(t *testing.T) {
	hub, backing, a, _, _ := sharedMounts(t, HubConfig{})
	f := changesOf(t, hub, backing)
	blocked := make(chan struct{}, 8)
	hook := func() { blocked <- struct{}{} }
	f.changes.blocked.Store(&hook)
	ag := startAgent(t, hub, "r", a)
	last := listing(t, backing)
	for _, op := range []string{"touch x", "mkdir y", "mv x z", "echo w > z", "rm z", "chmod 700 y"} {
		thaw := f.Freeze()
		if _, err := fmt.Fprintln(ag.in, op); err != nil {
			thaw()
			t.Fatal(err)
		}
		<-blocked // the request waits at the gate
		frozen := listing(t, backing)
		thaw()
		if !ag.out.Scan() || ag.out.Text() != "rc=0" {
			t.Fatalf("%s: %s %s", op, ag.out.Text(), ag.err)
		}
		if frozen != last {
			t.Fatalf("%s changed the folder while frozen: %s, before it %s", op, frozen, last)
		}
		last = listing(t, backing)
	}
	if _, err := os.Stat(filepath.Join(backing, "z")); !os.IsNotExist(err) {
		t.Fatalf("z: %v", err)
	}
	st, err := os.Stat(filepath.Join(backing, "y"))
	must(t, err)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("y: mode %v", st.Mode())
	}
}

// TestRestorer: a restore's changes are modifications like any other:
// each actor's earlier read is stale, the mounts show the new content at
// once, the change set marks them, and no link is followed on the way.
func TestRestorer(t *testing.T) {
	ctx := context.Background()
	hub, backing, a, _, log := sharedMounts(t, HubConfig{})
	f := changesOf(t, hub, backing)
	r := f.Restorer()
	ag := startAgent(t, hub, "lead", a)
	if rc := ag.do(t, "mkdir -p src/deep/er && echo v1 > src/app.ts && echo 1 > src/deep/er/x && cat src/app.ts >/dev/null"); rc != 0 {
		t.Fatalf("setup: %s", ag.err)
	}
	f.TakeChanges()
	f.TakeChanges()

	must(t, r.WriteFile(ctx, "src/app.ts", 0o640, strings.NewReader("v0\n")))
	must(t, r.Sync())
	if got := readString(t, filepath.Join(backing, "src/app.ts")); got != "v0\n" {
		t.Fatalf("backing: got %q", got)
	}
	st, err := os.Stat(filepath.Join(backing, "src/app.ts"))
	must(t, err)
	if st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", st.Mode().Perm())
	}
	// The mount shows the restored content at once, not its cache.
	if rc := ag.do(t, "grep -qx v0 src/app.ts"); rc != 0 {
		t.Fatalf("the mount does not show the restored content: %s", ag.err)
	}
	// lead's read (by grep just now) is current; a read made before the
	// restore is stale.
	other := startAgent(t, hub, "other", a)
	if rc := other.do(t, "cat src/deep/er/x >/dev/null"); rc != 0 {
		t.Fatalf("read: %s", other.err)
	}
	must(t, r.WriteFile(ctx, "src/deep/er/x", 0o644, strings.NewReader("2\n")))
	if rc := other.do(t, "echo 3 > src/deep/er/x"); rc == 0 {
		t.Fatal("a write based on a read made before the restore was allowed")
	}
	if got := log.list(); len(got) != 1 || got[0].Path != "src/deep/er/x" || got[0].Actor != RunActor("other") {
		t.Fatalf("stale reports %+v, want one of run other on src/deep/er/x", got)
	}
	if got := readString(t, filepath.Join(backing, "src/deep/er/x")); got != "2\n" {
		t.Fatalf("after the refused write: %q", got)
	}

	must(t, r.Mkdir(ctx, "made", 0o750))
	must(t, r.Mkdir(ctx, "made", 0o705)) // found made: its mode changes
	st, err = os.Stat(filepath.Join(backing, "made"))
	must(t, err)
	if !st.IsDir() || st.Mode().Perm() != 0o705 {
		t.Fatalf("made: %v", st.Mode())
	}
	must(t, r.Symlink(ctx, "made/link", "../src/app.ts"))
	if got, err := os.Readlink(filepath.Join(backing, "made/link")); err != nil || got != "../src/app.ts" {
		t.Fatalf("link: %q %v", got, err)
	}
	must(t, r.Symlink(ctx, "made/link", "../src")) // replaced
	for _, target := range []string{"/etc/passwd", "../../x", "../..", "a/../../.."} {
		if err := r.Symlink(ctx, "made/out", target); err == nil {
			t.Errorf("a link to %q leading out was made", target)
		}
	}
	must(t, r.Chmod(ctx, "src/app.ts", 0o600))
	must(t, r.Chmod(ctx, "made/link", 0o777)) // a link has no mode: left alone

	// Exact paths: a link in the folders is not followed.
	for _, p := range []string{"made/link/app.ts", "made/link/new"} {
		if err := r.WriteFile(ctx, p, 0o644, strings.NewReader("no")); err == nil {
			t.Errorf("WriteFile %s went through a link", p)
		}
		if err := r.RemoveAll(ctx, p); err == nil {
			t.Errorf("RemoveAll %s went through a link", p)
		}
	}
	if got := readString(t, filepath.Join(backing, "src/app.ts")); got != "v0\n" {
		t.Fatalf("written through a link: %q", got)
	}
	for _, p := range []string{"../x", "/etc", "a/../../x", "x\x00y"} {
		if err := r.WriteFile(ctx, p, 0o644, strings.NewReader("no")); err == nil {
			t.Errorf("WriteFile %q was allowed", p)
		}
	}

	must(t, r.RemoveAll(ctx, "src"))
	must(t, r.RemoveAll(ctx, "src")) // gone already: not an error
	if _, err := os.Lstat(filepath.Join(backing, "src")); !os.IsNotExist(err) {
		t.Fatalf("src after RemoveAll: %v", err)
	}
	// Once Sync returned, every mount was told.
	must(t, r.Sync())
	if rc := ag.do(t, "test ! -e src && ls made >/dev/null"); rc != 0 {
		t.Fatalf("the mount still shows what was removed: %s", ag.err)
	}

	got, complete := takeMap(t, f)
	if !complete {
		t.Fatal("the restore's change set is not complete")
	}
	for _, p := range []string{"src/app.ts", "src/deep/er/x", "made", "made/link", "src"} {
		if _, ok := got[p]; !ok {
			t.Errorf("change set %v lacks %s", got, p)
		}
	}
}

// TestRestorerRemovesWhatAppears: a folder filled while it is being
// removed is removed whole.
func TestRestorerRemoveAllDeep(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	deep := dir
	for i := range 50 {
		deep = filepath.Join(deep, fmt.Sprint("d", i))
	}
	must(t, os.MkdirAll(deep, 0o755))
	must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("x"), 0o444))
	must(t, os.Symlink("/etc", filepath.Join(dir, "d0", "l")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "d0", "fifo"), 0o644))
	must(t, os.Chmod(filepath.Join(dir, "d0", "d1"), 0o500))
	r := f.Restorer()
	must(t, r.RemoveAll(ctx, "d0"))
	if _, err := os.Lstat(filepath.Join(dir, "d0")); !os.IsNotExist(err) {
		t.Fatalf("d0: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("the link's target went: %v", err)
	}
	if err := r.RemoveAll(ctx, "."); err == nil {
		t.Fatal("RemoveAll of the root was allowed")
	}
}

// listing describes a folder's entries: names, kinds, modes and sizes.
func listing(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	must(t, err)
	var b strings.Builder
	for _, e := range es {
		info, err := e.Info()
		must(t, err)
		fmt.Fprintf(&b, "%s %v %d; ", e.Name(), info.Mode(), info.Size())
	}
	return b.String()
}
