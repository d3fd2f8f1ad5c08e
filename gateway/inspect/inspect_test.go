package inspect

import (
	"context"
	"errors"
	"io"
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
	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/badger"
)

// fakeThreads is the least of the threads the room needs: one lock per
// thread, a bind that records a binding over a folder of its own, and
// real FUSE mounts (package fs) onto the room's descriptors.
type fakeThreads struct {
	store meta.Store
	base  string // workspace folders

	mu     sync.Mutex
	locks  map[meta.ThreadKey]*sync.Mutex
	held   map[meta.ThreadKey]bool // a lock is held
	calls  []string                // "lock", "bind", "mount", in order
	mounts []string                // the paths Mount served
}

func (f *fakeThreads) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeThreads) Lock(ctx context.Context, k meta.ThreadKey) (func(), error) {
	f.mu.Lock()
	l := f.locks[k]
	if l == nil {
		l = new(sync.Mutex)
		f.locks[k] = l
	}
	f.mu.Unlock()
	l.Lock()
	f.mu.Lock()
	f.held[k] = true
	f.calls = append(f.calls, "lock")
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.held[k] = false
		f.mu.Unlock()
		l.Unlock()
	}, nil
}

func (f *fakeThreads) isHeld(k meta.ThreadKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[k]
}

func (f *fakeThreads) BindLocked(ctx context.Context, k meta.ThreadKey, _ *meta.Settings) (meta.Binding, error) {
	f.note("bind")
	if !f.isHeld(k) {
		return meta.Binding{}, errors.New("BindLocked without the thread's lock")
	}
	return f.bind(ctx, k)
}

// bind records k's binding if it has none, with its workspace folder.
func (f *fakeThreads) bind(ctx context.Context, k meta.ThreadKey) (meta.Binding, error) {
	if b, err := f.store.GetBinding(ctx, k); err == nil {
		return b, nil
	}
	root := filepath.Join(f.base, k.Tenant+"_"+k.Thread)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return meta.Binding{}, err
	}
	return f.store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Root: root, State: meta.StateBound, BoundAt: time.Now().UTC()})
}

func (f *fakeThreads) RootOf(b meta.Binding) (string, error) { return b.Root, nil }

func (f *fakeThreads) Mount(ctx context.Context, k meta.ThreadKey, root, mountPath string, readOnly bool, target *fs.Target) (io.Closer, error) {
	f.note("mount")
	f.mu.Lock()
	f.mounts = append(f.mounts, mountPath)
	f.mu.Unlock()
	m, err := fs.Serve(ctx, root, mountPath, fs.Options{Name: k.Tenant + "/" + k.Thread, ReadOnly: readOnly, Target: target, NoPollHack: true})
	if err != nil {
		return nil, err
	}
	return m, nil
}

type roomEnv struct {
	in      *Inspections
	threads *fakeThreads
	store   meta.Store
	log     *testenv.SyncBuffer
}

func newRoom(t *testing.T) *roomEnv {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	ws := filepath.Join(data, "workspaces")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := badger.Open(context.Background(), filepath.Join(data, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &roomEnv{store: store, log: new(testenv.SyncBuffer)}
	e.threads = &fakeThreads{store: store, base: ws, locks: map[meta.ThreadKey]*sync.Mutex{}, held: map[meta.ThreadKey]bool{}}
	e.in = e.open(t, data, ws)
	return e
}

// open makes a room over the same store and folders, as a restart does.
func (e *roomEnv) open(t *testing.T, data, ws string) *Inspections {
	t.Helper()
	in, err := New(Config{
		Store: e.store, Threads: e.threads, DataDir: data, WorkspacesDir: ws,
		Logger: hclog.New(&hclog.LoggerOptions{Output: e.log, Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the folders: runs before they are removed.
	t.Cleanup(func() {
		for _, m := range in.Drain() {
			m.Close()
		}
	})
	return in
}

// ownDir is an empty folder of this test's own, removed at the end after
// every mount in it went.
func ownDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		for _, p := range testenv.MountsUnder(t, dir) {
			t.Errorf("mount left at %s", p)
		}
	})
	return dir
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	return slices.Contains(testenv.MountsUnder(t, dir), dir)
}

// TestMountAndUnmount: a mount serves the thread's workspace at the
// folder asked for, under the thread's lock and after its bind, is
// recorded with the peer's uid and listed; the same folder, or one
// inside it, is refused while it is served; Unmount takes it down and
// forgets it.
func TestMountAndUnmount(t *testing.T) {
	testenv.RequireRootFUSE(t)
	e := newRoom(t)
	ctx := context.Background()
	dir := ownDir(t)
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}

	mi, err := e.in.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "t", Path: dir}, 0)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	if !mi.Mounted || mi.Writable || mi.Path != dir || mi.ThreadKey != k || mi.Owner != 0 {
		t.Errorf("got %+v, want a read-only mount of %v at %s", mi, k, dir)
	}
	if !mounted(t, dir) {
		t.Fatalf("%s is not mounted", dir)
	}
	if got := strings.Join(e.threads.calls, ","); got != "lock,bind,mount" {
		t.Errorf("calls of the threads: %s, want lock,bind,mount", got)
	}
	if e.threads.isHeld(k) {
		t.Error("the thread's lock is still held")
	}
	// The workspace shows through the mount.
	b, err := e.store.GetBinding(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Root, "seen"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "seen")); err != nil || string(got) != "x" {
		t.Errorf("read through the mount: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "w"), nil, 0o644); err == nil {
		t.Error("a write through a read-only inspection mount succeeded")
	}

	ms, err := e.in.List(ctx)
	if err != nil || len(ms) != 1 || !ms[0].Mounted || ms[0].Path != dir {
		t.Errorf("list: %+v, %v; want one mounted at %s", ms, err, dir)
	}
	if _, err := e.in.Mount(ctx, api.MountRequest{Thread: "other", Path: dir}, 0); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a second mount at %s: got %v, want ErrConflict", dir, err)
	}

	inUse, err := e.in.Unmount(ctx, dir+"/")
	if err != nil || inUse {
		t.Fatalf("unmount: %v (in use %v)", err, inUse)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted", dir)
	}
	if recs, err := e.store.ListInspectionMounts(ctx); err != nil || len(recs) != 0 {
		t.Errorf("records after unmount: %+v, %v; want none", recs, err)
	}
	if _, err := e.in.Unmount(ctx, dir); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a second unmount: got %v, want ErrNotFound", err)
	}
	if _, err := e.in.Unmount(ctx, "rel"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("unmount of a relative path: got %v, want ErrInvalid", err)
	}
}

// TestRefusedMountTouchesNoThread: a folder the checks refuse is refused
// before the thread is locked, bound or mounted, and leaves no record.
func TestRefusedMountTouchesNoThread(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, req := range []api.MountRequest{
		{Thread: "t", Path: full},
		{Thread: "t", Path: "rel"},
		{Thread: "", Path: t.TempDir()},
	} {
		if _, err := e.in.Mount(ctx, req, 0); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("mount %+v: got %v, want ErrInvalid", req, err)
		}
	}
	if len(e.threads.calls) != 0 {
		t.Errorf("refused mounts called the threads: %v", e.threads.calls)
	}
	if recs, err := e.store.ListInspectionMounts(ctx); err != nil || len(recs) != 0 {
		t.Errorf("records: %+v, %v; want none", recs, err)
	}
}

// TestNotInsideAMount: a folder inside a served inspection mount is
// refused, whether by the set (the recorded path) or by the walk (a FUSE
// mount on the way, once the mount moved away from its path).
func TestNotInsideAMount(t *testing.T) {
	testenv.RequireRootFUSE(t)
	e := newRoom(t)
	ctx := context.Background()
	base := ownDir(t)
	dir := filepath.Join(base, "p", "d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.in.Mount(ctx, api.MountRequest{Thread: "t", Path: dir, Writable: true}, 0); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(dir, "sub")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := e.in.Mount(ctx, api.MountRequest{Thread: "other", Path: inside}, 0)
	if err == nil || !strings.Contains(err.Error(), "FUSE") {
		t.Errorf("a mount inside an inspection mount: got %v, want a refusal (a FUSE mount)", err)
	}
	// Moved away with its parent: the walk still refuses to enter it.
	if err := os.Rename(filepath.Join(base, "p"), filepath.Join(base, "r")); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(base, "r", "d", "sub")
	if _, err := e.in.Mount(ctx, api.MountRequest{Thread: "other", Path: moved}, 0); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "FUSE") {
		t.Errorf("a mount inside a moved inspection mount: got %v, want ErrInvalid (a FUSE mount)", err)
	}
	// Unmount by the recorded path finds the mount where it went.
	if _, err := e.in.Unmount(ctx, dir); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	if got := testenv.MountsUnder(t, base); len(got) > 0 {
		t.Errorf("mounts left: %v", got)
	}
}

// TestCloseAndDrain: after Close no mount is made; Drain hands over the
// mounts and keeps their records, and puts nothing back after it.
func TestCloseAndDrain(t *testing.T) {
	testenv.RequireRootFUSE(t)
	e := newRoom(t)
	ctx := context.Background()
	dir := ownDir(t)
	if _, err := e.in.Mount(ctx, api.MountRequest{Thread: "t", Path: dir}, 0); err != nil {
		t.Fatal(err)
	}
	e.in.Close()
	if _, err := e.in.Mount(ctx, api.MountRequest{Thread: "t", Path: ownDir(t)}, 0); !errors.Is(err, api.ErrClosed) {
		t.Errorf("mount after Close: got %v, want ErrClosed", err)
	}
	got := e.in.Drain()
	if len(got) != 1 || got[dir] == nil {
		t.Fatalf("drain: %v, want the mount at %s", got, dir)
	}
	if err := got[dir].Close(); err != nil {
		t.Fatal(err)
	}
	if mounted(t, dir) {
		t.Errorf("%s still mounted", dir)
	}
	if recs, err := e.store.ListInspectionMounts(ctx); err != nil || len(recs) != 1 {
		t.Errorf("records after drain: %+v, %v; want the one kept", recs, err)
	}
	if ms, err := e.in.List(ctx); err != nil || len(ms) != 1 || ms[0].Mounted {
		t.Errorf("list after drain: %+v, %v; want the record, not mounted", ms, err)
	}
	if left := e.in.Drain(); len(left) != 0 {
		t.Errorf("a second drain: %v, want nothing", left)
	}
}

// TestRestore: at a start the recorded mounts are served again, a mount
// a crashed run left at one detached first; a record whose thread is
// gone or being deleted, or whose folder no longer passes the checks, is
// dropped. UnmountAllOf then takes a thread's mounts down.
func TestRestore(t *testing.T) {
	testenv.RequireRootFUSE(t)
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Thread: "t"}
	b, err := e.threads.bind(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	good, good2, full, gone, deleting := ownDir(t), ownDir(t), t.TempDir(), ownDir(t), ownDir(t)
	if err := os.WriteFile(filepath.Join(full, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dk := meta.ThreadKey{Thread: "deleting"}
	db, err := e.threads.bind(ctx, dk)
	if err != nil {
		t.Fatal(err)
	}
	db.State = meta.StateDeleting
	if _, err := e.store.UpdateBinding(ctx, db); err != nil {
		t.Fatal(err)
	}
	for _, m := range []meta.InspectionMount{
		{ThreadKey: k, Path: good, Writable: true},
		{ThreadKey: k, Path: good2},
		{ThreadKey: k, Path: full},
		{ThreadKey: meta.ThreadKey{Thread: "gone"}, Path: gone},
		{ThreadKey: dk, Path: deleting},
	} {
		if _, err := e.store.PutInspectionMount(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// What a crashed run left at good: a warren mount of the workspace.
	stale, err := fs.Serve(ctx, b.Root, good, fs.Options{Name: "stale", NoPollHack: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()

	mountedN, failed, err := e.in.Restore(ctx)
	if err != nil || mountedN != 2 || failed != 0 {
		t.Fatalf("restore: %d mounted, %d failed, %v; want 2, 0", mountedN, failed, err)
	}
	if got := testenv.MountsUnder(t, good); len(got) != 1 {
		t.Errorf("mounts at %s: %v, want one (the stale one detached)", good, got)
	}
	recs, err := e.store.ListInspectionMounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range recs {
		paths = append(paths, r.Path)
	}
	if want := []string{good, good2}; !sameSet(paths, want) {
		t.Errorf("records after restore: %v, want %v", paths, want)
	}
	log := e.log.String()
	for _, why := range []string{"its thread was deleted", "its folder no longer passes the checks"} {
		if !strings.Contains(log, "restore: dropping inspection mount: "+why) {
			t.Errorf("no drop logged for %q; log:\n%s", why, log)
		}
	}
	if len(testenv.MountsUnder(t, full)) > 0 {
		t.Errorf("%s, not empty, was covered", full)
	}

	unlock, err := e.threads.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.in.UnmountAllOf(ctx, k)
	unlock()
	if err != nil || !sameSet(got, []string{good, good2}) {
		t.Errorf("unmount all of %v: %v, %v; want %v", k, got, err, []string{good, good2})
	}
	for _, p := range []string{good, good2} {
		if mounted(t, p) {
			t.Errorf("%s still mounted", p)
		}
	}
	// The records are the caller's to forget (with the thread's).
	if recs, err := e.store.ListInspectionMounts(ctx); err != nil || len(recs) != 2 {
		t.Errorf("records: %+v, %v; want both kept", recs, err)
	}
}

// TestDetachStale detaches the warren mounts at a path, stacked too, and
// leaves a mount of another kind alone.
func TestDetachStale(t *testing.T) {
	testenv.RequireRootFUSE(t)
	ctx := context.Background()
	backing, dir := t.TempDir(), ownDir(t)
	for range 2 {
		m, err := fs.Serve(ctx, backing, dir, fs.Options{Name: "stale", NoPollHack: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
	}
	if err := DetachStale(dir); err != nil {
		t.Fatal(err)
	}
	if got := testenv.MountsUnder(t, dir); len(got) > 0 {
		t.Errorf("mounts left at %s: %v", dir, got)
	}
	if err := DetachStale(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a path that cannot be walked: %v, want nothing to do", err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
