package checkpoints

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/keyed"
	"warren/gateway/quota"
	"warren/meta"
	"warren/meta/badger"
	"warren/snapshot"
)

// The room's promises, without the daemon: a real store (Badger on a
// temporary folder), a real fs.Hub over temporary workspace folders, and
// fakes of the threads, the commands and the events.

// fakeThreads binds a thread by making its folder and its record.
type fakeThreads struct {
	store meta.Store
	base  string
	turns keyed.Locks[meta.ThreadKey]
	c     *Checkpoints // for Delete
}

func (t *fakeThreads) Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	b, err := t.store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		root, mnt, _ := t.Paths(k)
		if err := os.MkdirAll(root, 0o700); err != nil {
			return api.ThreadInfo{}, err
		}
		b, err = t.store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Root: root, MountPath: mnt, BoundAt: time.Now(), State: meta.StateBound})
	}
	return api.ThreadInfo{Binding: b, Mounted: true}, err
}

func (t *fakeThreads) Show(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	b, err := t.store.GetBinding(ctx, meta.ThreadKey{Tenant: tenant, Thread: thread})
	return api.ThreadInfo{Binding: b}, err
}

func (t *fakeThreads) LockTurn(ctx context.Context, k meta.ThreadKey) (func(), error) {
	return t.turns.Lock(ctx, k)
}

func (t *fakeThreads) Paths(k meta.ThreadKey) (string, string, error) {
	return filepath.Join(t.base, k.Tenant, k.Thread), filepath.Join(t.base, "mnt", k.Tenant, k.Thread), nil
}

func (t *fakeThreads) RootOf(b meta.Binding) (string, error) { return b.Root, nil }

func (t *fakeThreads) Delete(ctx context.Context, tenant, thread string) error {
	k := meta.ThreadKey{Tenant: tenant, Thread: thread}
	unlock, err := t.LockTurn(ctx, k)
	if err != nil {
		return err
	}
	defer unlock()
	b, err := t.store.GetBinding(ctx, k)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(b.Root); err != nil {
		return err
	}
	if err := t.c.DropHistory(ctx, k); err != nil {
		return err
	}
	return t.store.DeleteBinding(ctx, k, b.Revision)
}

// fakeCommands has the commands of running "run" until a restore with
// force ends them; it records the calls.
type fakeCommands struct {
	mu      sync.Mutex
	running []string
	marked  int // BeginRestore calls not yet ended
	calls   []string
}

func (f *fakeCommands) note(s string) {
	f.calls = append(f.calls, s)
}

func (f *fakeCommands) BeginRestore(k meta.ThreadKey, why string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("begin")
	f.marked++
	return slices.Clone(f.running)
}

func (f *fakeCommands) EndRestore(k meta.ThreadKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("end")
	f.marked--
}

func (f *fakeCommands) RunningJobIDs(k meta.ThreadKey) []string { return nil }

func (f *fakeCommands) NoteStopping(k meta.ThreadKey, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("note")
}

func (f *fakeCommands) CloseJail(k meta.ThreadKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("close")
	f.running = nil
}

func (f *fakeCommands) WaitThreadJobs(k meta.ThreadKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("wait")
}

// fakeEvents keeps the events.
type fakeEvents struct {
	mu  sync.Mutex
	evs []api.Event
}

func (e *fakeEvents) Emit(ev api.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *fakeEvents) Wants(meta.ThreadKey) bool { return true }

func (e *fakeEvents) types() []api.EventType {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []api.EventType
	for _, ev := range e.evs {
		ts = append(ts, ev.Type)
	}
	return ts
}

type room struct {
	c        *Checkpoints
	store    meta.Store
	hub      *fs.Hub
	threads  *fakeThreads
	commands *fakeCommands
	events   *fakeEvents
	steps    chan string // the collections' steps, "tenant step"
}

func newRoom(t *testing.T) *room {
	t.Helper()
	dir := t.TempDir()
	store, err := badger.Open(context.Background(), filepath.Join(dir, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	hub := fs.NewHub(fs.HubConfig{Logger: hclog.NewNullLogger()})
	t.Cleanup(hub.Close)
	ws := filepath.Join(dir, "workspaces")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	quotas, err := quota.Start(quota.Config{WorkspacesDir: ws, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r := &room{
		store: store, hub: hub,
		threads:  &fakeThreads{store: store, base: ws},
		commands: &fakeCommands{},
		events:   &fakeEvents{},
		steps:    make(chan string, 100),
	}
	r.c = New(Config{
		Store: store, Logger: hclog.NewNullLogger(), Hub: hub, Quotas: quotas,
		Threads: r.threads, Commands: r.commands, Events: r.events,
		Stale:    func(meta.ThreadKey) func(fs.Stale) { return func(fs.Stale) {} },
		CheckRun: func(string) error { return nil },
		RepoDir:  func(tenant string) string { return filepath.Join(dir, "snapshots", tenant) },
		CollectHook: func(tenant, step string) {
			select {
			case r.steps <- tenant + " " + step:
			default:
			}
		},
	})
	r.threads.c = r.c
	t.Cleanup(r.c.Close) // before the hub and the store close
	return r
}

var acme = meta.ThreadKey{Tenant: "acme", Thread: "t"}

// write writes through the hub, as a mount or the file API would, so
// that the workspace's change set has it.
func (r *room) write(t *testing.T, k meta.ThreadKey, path, content string) {
	t.Helper()
	info, err := r.threads.Bind(context.Background(), k.Tenant, k.Thread)
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.hub.Files(info.Root, k.Tenant+"/"+k.Thread, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(context.Background(), fs.RunActor("test"), path, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

func (r *room) read(t *testing.T, k meta.ThreadKey, path string) string {
	t.Helper()
	root, _, _ := r.threads.Paths(k)
	b, err := os.ReadFile(filepath.Join(root, path))
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (r *room) checkpoint(t *testing.T, k meta.ThreadKey) meta.Checkpoint {
	t.Helper()
	out, err := r.c.checkpoint(context.Background(), k.Tenant, k.Thread, api.CheckpointRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return out.Checkpoint.Checkpoint
}

// TestUndoRedo: undo keeps the workspace's changes in a checkpoint and
// goes back to the head; redo goes forward again; no command could start
// meanwhile, and the journal is closed.
func TestUndoRedo(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.write(t, acme, "a.txt", "one")
	cp1 := r.checkpoint(t, acme)
	r.write(t, acme, "a.txt", "two")
	r.write(t, acme, "b.txt", "new")

	u, err := r.c.undo(ctx, acme.Tenant, acme.Thread, false)
	if err != nil {
		t.Fatal(err)
	}
	if u.To != cp1.ID || u.Saved == "" || u.Head != cp1.ID || !slices.Equal(u.Redo, []string{u.Saved}) {
		t.Fatalf("undo: %+v; want to %s, the changes saved and on the redo stack", u, cp1.ID)
	}
	if got := r.read(t, acme, "a.txt") + "," + r.read(t, acme, "b.txt"); got != "one,<none>" {
		t.Errorf("after undo: a.txt,b.txt = %s, want one,<none>", got)
	}
	if _, err := r.c.redo(ctx, acme.Tenant, acme.Thread, false); err != nil {
		t.Fatal(err)
	}
	if got := r.read(t, acme, "a.txt") + "," + r.read(t, acme, "b.txt"); got != "two,new" {
		t.Errorf("after redo: a.txt,b.txt = %s, want two,new", got)
	}
	h, err := r.store.GetHistory(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if h.Restoring != nil || h.Head != u.Saved || len(h.Redo) != 0 {
		t.Errorf("history after redo: restoring %+v, head %s, redo %v; want no journal, head %s", h.Restoring, h.Head, h.Redo, u.Saved)
	}
	if r.commands.marked != 0 || !slices.Equal(r.commands.calls, []string{"begin", "end", "begin", "end"}) {
		t.Errorf("commands: %v (%d marked); want each restore marked and unmarked", r.commands.calls, r.commands.marked)
	}
	want := []api.EventType{api.EventCheckpointCreated, api.EventThreadRestored, api.EventThreadRestored}
	if got := r.events.types(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	list, err := r.c.listCheckpoints(ctx, acme.Tenant, acme.Thread)
	if err != nil || len(list.Checkpoints) != 2 || list.Head != u.Saved {
		t.Errorf("list: %+v %v; want 2 checkpoints, head %s", list, err, u.Saved)
	}
}

// TestRestoreRefusedWhileCommandsRun: a restore refuses running commands
// (409 busy, nothing changed), or stops them first with force.
func TestRestoreRefusedWhileCommandsRun(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.write(t, acme, "a.txt", "one")
	cp1 := r.checkpoint(t, acme)
	r.write(t, acme, "a.txt", "two")
	r.checkpoint(t, acme)
	r.commands.running = []string{"exec-1"}

	_, err := r.c.revert(ctx, acme.Tenant, acme.Thread, cp1.ID, false)
	if !errors.Is(err, api.ErrBusy) {
		t.Fatalf("revert while a command runs: %v, want ErrBusy", err)
	}
	if got := r.read(t, acme, "a.txt"); got != "two" {
		t.Errorf("a refused revert changed a.txt: %q", got)
	}
	out, err := r.c.revert(ctx, acme.Tenant, acme.Thread, cp1.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Stopped, []string{"exec-1"}) || r.read(t, acme, "a.txt") != "one" {
		t.Errorf("revert with force: stopped %v, a.txt %q; want exec-1 stopped, one", out.Stopped, r.read(t, acme, "a.txt"))
	}
	want := []string{"begin", "end", "begin", "note", "close", "wait", "end"}
	if r.commands.marked != 0 || !slices.Equal(r.commands.calls, want) {
		t.Errorf("commands: %v (%d marked), want %v", r.commands.calls, r.commands.marked, want)
	}
}

// TestFinishRestore: a restore a crash cut short (its journal in the
// history) is finished by FinishRestore, as the start does.
func TestFinishRestore(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.write(t, acme, "a.txt", "one")
	cp1 := r.checkpoint(t, acme)
	r.write(t, acme, "a.txt", "two")
	r.write(t, acme, "b.txt", "new")
	cp2 := r.checkpoint(t, acme)

	h, err := r.store.GetHistory(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	// The undo to cp-1 wrote a.txt, then the daemon died.
	h.Restoring = &meta.Restore{Op: "undo", To: cp1.ID, Tree: cp1.Tree, Head: cp1.ID, Redo: []string{cp2.ID},
		StartedAt: time.Now().UTC(), From: cp2.Tree}
	if _, err := r.store.PutHistory(ctx, h); err != nil {
		t.Fatal(err)
	}
	r.write(t, acme, "a.txt", "one")

	b, err := r.store.GetBinding(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.c.FinishRestore(ctx, acme, b); err != nil {
		t.Fatal(err)
	}
	if got := r.read(t, acme, "a.txt") + "," + r.read(t, acme, "b.txt"); got != "one,<none>" {
		t.Errorf("after the finish: a.txt,b.txt = %s, want one,<none>", got)
	}
	h, err = r.store.GetHistory(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	if h.Restoring != nil || h.Head != cp1.ID || !slices.Equal(h.Redo, []string{cp2.ID}) {
		t.Errorf("history: restoring %+v, head %s, redo %v; want the journal done, head %s, redo [%s]", h.Restoring, h.Head, h.Redo, cp1.ID, cp2.ID)
	}
}

// TestRestoreOutlivesCaller: a restore's context ends with EndRestores,
// never with its caller's.
func TestRestoreOutlivesCaller(t *testing.T) {
	r := newRoom(t)
	caller, cancel := context.WithCancel(context.Background())
	ctx, done := r.c.restoreContext(caller)
	defer done()
	cancel()
	if ctx.Err() != nil {
		t.Fatalf("the caller's end ended the restore: %v", ctx.Err())
	}
	r.c.EndRestores()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("EndRestores did not end the restore")
	}
}

// TestForkAndDelete: a fork makes a new thread at a checkpoint; a
// delete's DropHistory collects what no other thread uses; after Close no
// repository opens.
func TestForkAndDelete(t *testing.T) {
	r := newRoom(t)
	ctx := context.Background()
	r.write(t, acme, "a.txt", "one")
	cp1 := r.checkpoint(t, acme)
	r.write(t, acme, "a.txt", strings.Repeat("two", 1000))
	cp2 := r.checkpoint(t, acme)

	f, err := r.c.fork(ctx, acme.Tenant, acme.Thread, api.ForkRequest{Checkpoint: cp1.ID, Thread: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	t2 := meta.ThreadKey{Tenant: "acme", Thread: "t2"}
	if f.From != cp1.ID || f.Checkpoint != "cp-1" || r.read(t, t2, "a.txt") != "one" {
		t.Errorf("fork: %+v, a.txt %q; want from %s, at cp-1, a.txt one", f, r.read(t, t2, "a.txt"), cp1.ID)
	}

	repo, err := r.c.Repo("acme")
	if err != nil {
		t.Fatal(err)
	}
	// The objects only the deleted thread's cp-2 reaches go with it. (They
	// are asked for by hash: whether an object is loose or still in a log
	// depends on when the spreader ran, so a count of files says nothing.)
	objectsOf := func(tree string) map[snapshot.Hash]bool {
		h, err := snapshot.ParseHash(tree)
		if err != nil {
			t.Fatal(err)
		}
		set := map[snapshot.Hash]bool{}
		if err := repo.Raw().Objects(ctx, h, func(o snapshot.Hash, _ snapshot.ObjectKind) error { set[o] = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return set
	}
	kept := objectsOf(cp1.Tree)
	var only []snapshot.Hash
	for o := range objectsOf(cp2.Tree) {
		if !kept[o] {
			only = append(only, o)
		}
	}
	if len(only) == 0 {
		t.Fatal("cp-2 reaches no object of its own")
	}
	if err := r.threads.Delete(ctx, acme.Tenant, acme.Thread); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r.steps, "acme done")
	for _, o := range only {
		if repo.Raw().Has(o) {
			t.Errorf("object %s of the deleted thread's cp-2 only is still there after its collection", o)
		}
	}
	if _, err := r.c.diff(ctx, t2.Tenant, t2.Thread, "", "", false); err != nil {
		t.Errorf("the fork lost objects it uses: %v", err)
	}

	r.c.Close()
	if _, err := r.c.Repo("acme"); !errors.Is(err, api.ErrClosed) {
		t.Errorf("Repo after Close: %v, want ErrClosed", err)
	}
}

func waitFor(t *testing.T, steps <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-steps:
			if s == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q", want)
		}
	}
}
