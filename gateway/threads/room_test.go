package threads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/hosts"
	"warren/gateway/quota"
	"warren/gateway/threadlimit"
	"warren/internal/testenv"
	"warren/meta"
	"warren/meta/badger"
)

// The room's promises, without the daemon: a real store (Badger on a
// temporary folder), real FUSE mounts (FUSEMounter), the real hosts,
// quotas and admission rooms, and fakes of the rooms above the threads
// (jails, jobs, inspections, history) and of the events, which note
// every call in one log so that a test can read their order.

// callLog is the calls the fakes got, in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

type fakeJails struct{ log *callLog }

func (f fakeJails) CloseJail(k meta.ThreadKey) { f.log.note("CloseJail %s", k.Thread) }
func (f fakeJails) Seed(ctx context.Context, b meta.Binding, script string) error {
	f.log.note("Seed %s", b.Thread)
	return nil
}
func (f fakeJails) Resettle(k meta.ThreadKey, s meta.Settings) (func(), error) {
	f.log.note("Resettle %s", k.Thread)
	return func() {}, nil
}

type fakeJobs struct {
	log *callLog

	mu      sync.Mutex
	running map[meta.ThreadKey]int
}

func (f *fakeJobs) setRunning(k meta.ThreadKey, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[k] = n
}

func (f *fakeJobs) Running(k meta.ThreadKey) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[k]
}
func (f *fakeJobs) SetClosing(k meta.ThreadKey, closing bool) {
	f.log.note("SetClosing %s %v", k.Thread, closing)
}
func (f *fakeJobs) NoteStopping(k meta.ThreadKey, why string) {
	f.log.note("NoteStopping %s: %s", k.Thread, why)
}
func (f *fakeJobs) EndThread(k meta.ThreadKey) { f.log.note("EndThread %s", k.Thread) }
func (f *fakeJobs) NoteMoved(ctx context.Context, k meta.ThreadKey) {
	f.log.note("NoteMoved %s", k.Thread)
}
func (f *fakeJobs) NoteRestarted(ctx context.Context, bs []meta.Binding) { f.log.note("NoteRestarted") }
func (f *fakeJobs) NoteWorkspace(k meta.ThreadKey, note string) {
	f.log.note("NoteWorkspace %s: %s", k.Thread, note)
}

// fakeInspections notes the state the thread's record had when its
// inspection mounts were taken down, and returns paths as theirs.
type fakeInspections struct {
	log   *callLog
	store meta.Store
	paths []string

	mu   sync.Mutex
	fail error // UnmountAllOf fails while set
}

func (f *fakeInspections) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeInspections) UnmountAllOf(ctx context.Context, k meta.ThreadKey) ([]string, error) {
	state := "no record"
	if b, err := f.store.GetBinding(ctx, k); err == nil {
		state = string(b.State)
	}
	f.log.note("UnmountAllOf %s (record %s)", k.Thread, state)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	return f.paths, nil
}
func (f *fakeInspections) DetachStale(path string) error { return nil }

// fakeHistory fails DropHistory while fail is set.
type fakeHistory struct {
	log *callLog

	mu   sync.Mutex
	fail error
}

func (f *fakeHistory) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeHistory) FinishRestore(ctx context.Context, k meta.ThreadKey, b meta.Binding) error {
	return nil
}
func (f *fakeHistory) FinishMoved(ctx context.Context, b meta.Binding) {
	f.log.note("FinishMoved %s", b.Thread)
}
func (f *fakeHistory) RestoreMoved(ctx context.Context, b meta.Binding, from string) (string, string, error) {
	f.log.note("RestoreMoved %s from %s", b.Thread, from)
	return "", "", nil
}
func (f *fakeHistory) DropHistory(ctx context.Context, k meta.ThreadKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log.note("DropHistory %s", k.Thread)
	return f.fail
}

// fakeEvents keeps the events told; nobody wants a costly one.
type fakeEvents struct {
	mu  sync.Mutex
	evs []api.Event
}

func (f *fakeEvents) Emit(ev api.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.evs = append(f.evs, ev)
}
func (f *fakeEvents) Wants(meta.ThreadKey) bool                    { return false }
func (f *fakeEvents) OnRefusal(meta.ThreadKey) func(fs.Refusal)    { return func(fs.Refusal) {} }
func (f *fakeEvents) OnStale(meta.ThreadKey) func(fs.Stale)        { return func(fs.Stale) {} }
func (f *fakeEvents) OnChange(meta.ThreadKey) func(fs.EntryChange) { return func(fs.EntryChange) {} }
func (f *fakeEvents) take() []api.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	evs := f.evs
	f.evs = nil
	return evs
}

type fakeMetrics struct{}

func (fakeMetrics) Fenced(int) {}

// failMounter is the real FUSE mounter whose Mount fails while fail is set.
type failMounter struct {
	FUSEMounter
	mu   sync.Mutex
	fail error
}

func (m *failMounter) setFail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

func (m *failMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	m.mu.Lock()
	err := m.fail
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return m.FUSEMounter.Mount(ctx, backing, mountpoint, opts)
}

// failStore is a store whose CreateBinding fails while fail is set.
type failStore struct {
	meta.Store
	mu   sync.Mutex
	fail error
}

func (s *failStore) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

func (s *failStore) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	s.mu.Lock()
	err := s.fail
	s.mu.Unlock()
	if err != nil {
		return meta.Binding{}, err
	}
	return s.Store.CreateBinding(ctx, b)
}

type roomEnv struct {
	th      *Threads
	store   *failStore
	mounter *failMounter
	calls   *callLog
	jobs    *fakeJobs
	insp    *fakeInspections
	history *fakeHistory
	events  *fakeEvents
	admit   *threadlimit.Admitter

	data, ws, mnt string
}

// newRoom makes the threads over a new store and data folder, restored
// (nothing to restore) and attached to fakes of the rooms above. Every
// mount is taken down at the end, failed or not, and every folder
// unsealed so that the temporary folder goes.
func newRoom(t *testing.T) *roomEnv {
	t.Helper()
	testenv.RequireRootFUSE(t)
	ctx := context.Background()
	e := &roomEnv{data: filepath.Join(t.TempDir(), "data")}
	e.ws, e.mnt = filepath.Join(e.data, "workspaces"), filepath.Join(e.data, "mnt")
	for _, dir := range []string{e.ws, e.mnt} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := badger.Open(ctx, filepath.Join(e.data, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	// Runs after the mounts went (registered before their cleanup).
	t.Cleanup(func() {
		for _, p := range testenv.MountsUnder(t, e.data) {
			t.Errorf("mount left at %s", p)
		}
		testenv.UnsealMountPoints(t, e.data)
	})
	e.store = &failStore{Store: s}
	log := hclog.NewNullLogger()
	q, err := quota.Start(quota.Config{WorkspacesDir: e.ws, StoreDir: filepath.Join(e.data, "meta"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.admit, err = threadlimit.New(threadlimit.Config{MaxThreads: 64, MaxThreadsPerTenant: 64, FDReserve: 16,
		MemoryCap: 1 << 40, OSThreadLimit: 10000, OSThreadReserve: 100})
	if err != nil {
		t.Fatal(err)
	}
	h, err := hosts.Start(ctx, hosts.Config{RenewEvery: time.Second, ExpiresAfter: 5 * time.Second, Store: e.store, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	e.calls, e.events, e.mounter = new(callLog), new(fakeEvents), new(failMounter)
	e.jobs = &fakeJobs{log: e.calls, running: map[meta.ThreadKey]int{}}
	e.insp = &fakeInspections{log: e.calls, store: e.store}
	e.history = &fakeHistory{log: e.calls}
	e.th = New(Config{
		Store: e.store, Logger: log, DataDir: e.data, WorkspacesDir: e.ws, MountsDir: e.mnt,
		Mounter: e.mounter, Admit: e.admit, Quotas: q, Events: e.events, Metrics: fakeMetrics{}, MaxCheckpoints: 10,
	})
	e.th.Attach(Deps{Hosts: h, Jails: fakeJails{e.calls}, Jobs: e.jobs, Inspections: e.insp, History: e.history})
	if _, err := e.th.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	e.th.StartRestore()
	t.Cleanup(func() {
		e.th.EndRestore()
		for k, m := range e.th.Drain() {
			if err := m.Close(); err != nil {
				t.Errorf("unmount %v: %v", k, err)
			}
		}
	})
	e.calls.take()
	return e
}

// paths returns k's backing folder and mount point as the room names them.
func (e *roomEnv) paths(t *testing.T, k meta.ThreadKey) (root, mnt string) {
	t.Helper()
	root, mnt, err := e.th.Paths(k)
	if err != nil {
		t.Fatal(err)
	}
	return root, mnt
}

// mountsAt counts the mounts at path.
func mountsAt(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, p := range testenv.MountsUnder(t, path) {
		if p == path {
			n++
		}
	}
	return n
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// leaves lists the folders two levels below base (base/TENANT/THREAD),
// but not the homes (HomesDir) in a workspaces folder.
func leaves(t *testing.T, base string) []string {
	t.Helper()
	ps, err := filepath.Glob(filepath.Join(base, "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(ps, func(p string) bool { return filepath.Base(filepath.Dir(p)) == HomesDir })
}

func eventTypes(evs []api.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Type)+" "+ev.Thread)
	}
	return out
}

func statusOf(err error) string {
	s, c := call.Classify(err)
	return fmt.Sprintf("%d %s", s, c)
}

// TestBindMountsOnce: a bind makes the thread's folder and mount point,
// mounts one on the other and records the binding; the workspace shows
// through the mount; a second bind, or many at once, change nothing.
func TestBindMountsOnce(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, mnt := e.paths(t, k)

	ti, err := e.th.Bind(ctx, "acme", "t")
	if err != nil {
		t.Fatalf("bind: %v", err)
	}
	if !ti.Mounted || ti.State != meta.StateBound || ti.Root != root || ti.MountPath != mnt || ti.ThreadKey != k {
		t.Errorf("bind: got %+v, want %v bound and mounted, root %s at %s", ti, k, root, mnt)
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Fatalf("mounts at %s: %d, want 1", mnt, n)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		t.Fatalf("workspace folder %s: %v", root, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "f")); err != nil || string(got) != "x" {
		t.Errorf("the write in the folder: %q, %v", got, err)
	}
	b, err := e.store.GetBinding(ctx, k)
	if err != nil || b.State != meta.StateBound || b.Root != root || b.MountPath != mnt {
		t.Errorf("record: %+v, %v", b, err)
	}
	if got := eventTypes(e.events.take()); !slices.Equal(got, []string{"thread.bound t"}) {
		t.Errorf("events: %v, want one thread.bound", got)
	}

	// Again, and many at once: the same binding, one mount, one slot.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	infos := make([]api.ThreadInfo, 8)
	for i := range 8 {
		wg.Go(func() { infos[i], errs[i] = e.th.Bind(ctx, "acme", "t") })
	}
	wg.Wait()
	for i := range 8 {
		if errs[i] != nil || infos[i].Revision != b.Revision || !infos[i].BoundAt.Equal(b.BoundAt) || !infos[i].Mounted {
			t.Errorf("bind again: %+v, %v; want the same binding (revision %d), mounted", infos[i], errs[i], b.Revision)
		}
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Errorf("mounts at %s after binding again: %d, want 1", mnt, n)
	}
	if got := e.th.Headroom().Threads; got != 1 {
		t.Errorf("admission slots: %d, want 1", got)
	}
	if evs := e.events.take(); len(evs) != 0 {
		t.Errorf("events of binding again: %v, want none", eventTypes(evs))
	}
	if calls := e.calls.take(); len(calls) != 0 {
		t.Errorf("calls of the rooms above: %v, want none", calls)
	}
}

// TestFailedBindLeavesNothing: a bind whose mount fails, or whose record
// cannot be written after the mount served, leaves no record, no mount,
// no folder it made and no admission slot, and tells no event; the next
// bind works.
func TestFailedBindLeavesNothing(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, mnt := e.paths(t, k)
	home := filepath.Join(e.ws, HomesDir, "acme", "t")
	boom := errors.New("boom")

	check := func(what string) {
		t.Helper()
		if _, err := e.store.GetBinding(ctx, k); !errors.Is(err, meta.ErrNotFound) {
			t.Errorf("%s: record: %v, want none", what, err)
		}
		if ms := testenv.MountsUnder(t, e.data); len(ms) != 0 {
			t.Errorf("%s: mounts left: %v", what, ms)
		}
		for _, p := range []string{root, home, mnt} {
			if exists(p) {
				t.Errorf("%s: folder %s left", what, p)
			}
		}
		if e.th.Mounted(k) {
			t.Errorf("%s: the room says it is mounted", what)
		}
		if got := e.th.Headroom().Threads; got != 0 {
			t.Errorf("%s: admission slots: %d, want 0", what, got)
		}
		if evs := e.events.take(); len(evs) != 0 {
			t.Errorf("%s: events: %v, want none", what, eventTypes(evs))
		}
	}

	e.mounter.setFail(boom)
	if _, err := e.th.Bind(ctx, "acme", "t"); !errors.Is(err, boom) {
		t.Fatalf("bind with a failing mount: got %v, want boom", err)
	}
	check("failed mount")
	e.mounter.setFail(nil)

	e.store.setFail(boom)
	if _, err := e.th.Bind(ctx, "acme", "t"); !errors.Is(err, boom) {
		t.Fatalf("bind with a failing record: got %v, want boom", err)
	}
	check("failed record")
	e.store.setFail(nil)

	if ti, err := e.th.Bind(ctx, "acme", "t"); err != nil || !ti.Mounted {
		t.Fatalf("bind after the failures: %+v, %v", ti, err)
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Errorf("mounts at %s: %d, want 1", mnt, n)
	}
}

// TestBindAfterCloseIsRefused: once the room is closed a bind is refused
// (closed, 503) and the mount it made goes.
func TestBindAfterCloseIsRefused(t *testing.T) {
	e := newRoom(t)
	e.th.Close()
	if e.th.Serving() {
		t.Error("Serving after Close")
	}
	_, err := e.th.Bind(context.Background(), "acme", "t")
	if !errors.Is(err, api.ErrClosed) {
		t.Fatalf("bind after Close: got %v, want ErrClosed", err)
	}
	if ms := testenv.MountsUnder(t, e.data); len(ms) != 0 {
		t.Errorf("mounts left: %v", ms)
	}
	if got := e.th.Headroom().Threads; got != 0 {
		t.Errorf("admission slots: %d, want 0", got)
	}
}

// TestCloseKeepsFolderAndRecord: close ends the thread's jail, then its
// jobs, unmounts it and records it closed; its folder stays with what
// was written, its mount point refuses writes while it is not served,
// and the next bind serves the same folder again.
func TestCloseKeepsFolderAndRecord(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, mnt := e.paths(t, k)
	if e.th.sealOff {
		testenv.CannotRun(t, "the mount points' filesystem has no immutable flag")
	}
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.events.take()

	ti, err := e.th.CloseThread(ctx, "acme", "t")
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	if ti.Mounted || ti.State != meta.StateClosed || ti.ClosedAt.IsZero() {
		t.Errorf("close: got %+v, want closed and not mounted", ti)
	}
	if got := e.calls.take(); !slices.Equal(got, []string{"CloseJail t", "EndThread t"}) {
		t.Errorf("calls: %v, want CloseJail then EndThread", got)
	}
	if n := mountsAt(t, mnt); n != 0 {
		t.Errorf("mounts at %s after close: %d", mnt, n)
	}
	if got, err := os.ReadFile(filepath.Join(root, "kept")); err != nil || string(got) != "x" {
		t.Errorf("the folder's file after close: %q, %v", got, err)
	}
	if b, err := e.store.GetBinding(ctx, k); err != nil || b.State != meta.StateClosed {
		t.Errorf("record after close: %+v, %v; want closed", b, err)
	}
	if got := e.events.take(); len(got) != 1 || got[0].Type != api.EventThreadClosed || got[0].Message != "closed; the folder is kept" {
		t.Errorf("events: %+v, want one thread.closed", got)
	}
	if got := e.th.Headroom().Threads; got != 0 {
		t.Errorf("admission slots after close: %d, want 0", got)
	}
	// Unserved: the bare mount point takes no write, by root either.
	if !exists(mnt) {
		t.Fatalf("mount point %s gone after close", mnt)
	}
	if err := os.WriteFile(filepath.Join(mnt, "lost"), nil, 0o644); !errors.Is(err, syscall.EPERM) {
		t.Errorf("write in the unserved mount point: got %v, want EPERM", err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mkdir in the unserved mount point: got %v, want EPERM", err)
	}

	// Closing a closed thread changes nothing and tells nothing.
	if _, err := e.th.CloseThread(ctx, "acme", "t"); err != nil {
		t.Fatalf("close again: %v", err)
	}
	if evs := e.events.take(); len(evs) != 0 {
		t.Errorf("events of closing again: %v", eventTypes(evs))
	}
	e.calls.take()

	ti, err = e.th.Bind(ctx, "acme", "t")
	if err != nil || !ti.Mounted || ti.State != meta.StateBound {
		t.Fatalf("bind after close: %+v, %v", ti, err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "kept")); err != nil || string(got) != "x" {
		t.Errorf("the file through the mount again: %q, %v", got, err)
	}
	if _, err := e.th.CloseThread(ctx, "acme", "nobody"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("close of an unbound thread: got %v, want ErrNotFound", err)
	}
}

// TestCloseWhileJobsRun: a thread closed while its jobs run is recorded
// closed at once but keeps its jail and mount for them; a bind takes it
// back as it is.
func TestCloseWhileJobsRun(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	_, mnt := e.paths(t, k)
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	e.jobs.setRunning(k, 1)
	ti, err := e.th.CloseThread(ctx, "acme", "t")
	if err != nil || ti.State != meta.StateClosed || !ti.Mounted {
		t.Fatalf("close with a job running: %+v, %v; want closed and still mounted", ti, err)
	}
	if got := e.calls.take(); !slices.Equal(got, []string{"SetClosing t true"}) {
		t.Errorf("calls: %v, want only SetClosing true (no jail or jobs ended)", got)
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Errorf("mounts at %s: %d, want 1", mnt, n)
	}
	ti, err = e.th.Bind(ctx, "acme", "t")
	if err != nil || ti.State != meta.StateBound || !ti.Mounted {
		t.Fatalf("bind again: %+v, %v", ti, err)
	}
	if got := e.calls.take(); !slices.Equal(got, []string{"SetClosing t false"}) {
		t.Errorf("calls of the bind: %v, want SetClosing false", got)
	}
	if n := mountsAt(t, mnt); n != 1 {
		t.Errorf("mounts at %s after binding again: %d, want 1", mnt, n)
	}
}

// TestDeleteRemovesEverything: a delete records "deleting" before it
// takes anything down, then takes down the inspection mounts, tells the
// jobs, ends the jail and the jobs, unmounts, removes the folder, the
// home, the mount point and the records (inspection mounts, jobs,
// history, binding), and tells thread.deleted.
func TestDeleteRemovesEverything(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, mnt := e.paths(t, k)
	home := filepath.Join(e.ws, HomesDir, "acme", "t")
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	insp := filepath.Join(t.TempDir(), "look")
	if _, err := e.store.PutInspectionMount(ctx, meta.InspectionMount{ThreadKey: k, Path: insp, MadeAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.insp.paths = []string{insp}
	if _, err := e.store.CreateJob(ctx, meta.Job{ThreadKey: k, Seq: 1, Label: "sleep 1", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.events.take()

	if err := e.th.Delete(ctx, "acme", "t"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	want := []string{
		"UnmountAllOf t (record deleting)",
		"NoteStopping t: its thread was deleted",
		"CloseJail t",
		"EndThread t",
		"DropHistory t",
	}
	if got := e.calls.take(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %q\nwant %q", got, want)
	}
	if ms := testenv.MountsUnder(t, e.data); len(ms) != 0 {
		t.Errorf("mounts left: %v", ms)
	}
	for _, p := range []string{root, home, mnt} {
		if exists(p) {
			t.Errorf("%s left after delete", p)
		}
	}
	if _, err := e.store.GetBinding(ctx, k); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("binding after delete: %v, want none", err)
	}
	if ms, err := e.store.ListInspectionMounts(ctx); err != nil || len(ms) != 0 {
		t.Errorf("inspection records after delete: %+v, %v", ms, err)
	}
	if js, err := e.store.ListJobs(ctx, k); err != nil || len(js) != 0 {
		t.Errorf("job records after delete: %+v, %v", js, err)
	}
	if got := eventTypes(e.events.take()); !slices.Equal(got, []string{"thread.deleted t"}) {
		t.Errorf("events: %v, want thread.deleted", got)
	}
	if got := e.th.Headroom().Threads; got != 0 {
		t.Errorf("admission slots after delete: %d, want 0", got)
	}
	if err := e.th.Delete(ctx, "acme", "t"); statusOf(err) != "404 not_found" {
		t.Errorf("delete again: got %v (%s), want 404 not_found", err, statusOf(err))
	}
}

// TestDeleteCutShortIsFinished: a delete that fails after it was
// recorded, before it took anything down, leaves the thread "deleting":
// a bind or a close is refused (gone), never serving it half deleted,
// and the next delete finishes it; so does one cut short later (its
// history could not be dropped).
func TestDeleteCutShortIsFinished(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root, mnt := e.paths(t, k)
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	e.insp.setFail(boom)
	if err := e.th.Delete(ctx, "acme", "t"); !errors.Is(err, boom) {
		t.Fatalf("delete with failing inspections: got %v, want boom", err)
	}
	if b, err := e.store.GetBinding(ctx, k); err != nil || b.State != meta.StateDeleting {
		t.Fatalf("record after the failed delete: %+v, %v; want deleting", b, err)
	}
	if _, err := e.th.Bind(ctx, "acme", "t"); statusOf(err) != "410 gone" {
		t.Errorf("bind of a thread being deleted: got %v (%s), want 410 gone", err, statusOf(err))
	}
	if _, err := e.th.CloseThread(ctx, "acme", "t"); !errors.Is(err, api.ErrGone) {
		t.Errorf("close of a thread being deleted: got %v, want ErrGone", err)
	}
	e.insp.setFail(nil)
	e.history.setFail(boom)
	if err := e.th.Delete(ctx, "acme", "t"); !errors.Is(err, boom) {
		t.Fatalf("delete with a failing history: got %v, want boom", err)
	}
	if _, err := e.th.Bind(ctx, "acme", "t"); statusOf(err) != "410 gone" {
		t.Errorf("bind of a thread whose delete was cut short: got %v (%s), want 410 gone", err, statusOf(err))
	}
	e.history.setFail(nil)
	e.calls.take()
	if err := e.th.Delete(ctx, "acme", "t"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if got := e.calls.take(); len(got) == 0 || got[0] != "UnmountAllOf t (record deleting)" || got[len(got)-1] != "DropHistory t" {
		t.Errorf("calls of the second delete: %v", got)
	}
	if _, err := e.store.GetBinding(ctx, k); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("binding after the second delete: %v, want none", err)
	}
	for _, p := range []string{root, mnt} {
		if exists(p) {
			t.Errorf("%s left after delete", p)
		}
	}
}

// TestOddIDsGetFoldersOfTheirOwn: ids that are path syntax ("..", ".",
// "a/b", NUL, upper case) each get their own folder and mount point
// exactly two levels below the bases, never anywhere else; "" is the
// default tenant.
func TestOddIDsGetFoldersOfTheirOwn(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	keys := []meta.ThreadKey{
		{Tenant: "acme", Thread: ".."},
		{Tenant: "acme", Thread: "."},
		{Tenant: "acme", Thread: "a/b"},
		{Tenant: "acme", Thread: "a"},
		{Tenant: "acme", Thread: "a\x00b"},
		{Tenant: "acme", Thread: "ab"},
		{Tenant: "acme", Thread: "A"},
		{Tenant: "..", Thread: "t"},
		{Tenant: "a/b", Thread: "t"},
		{Tenant: "a", Thread: "b/t"},
		{Tenant: "", Thread: "t"},
	}
	roots, mnts := map[string]meta.ThreadKey{}, map[string]meta.ThreadKey{}
	for _, k := range keys {
		ti, err := e.th.Bind(ctx, k.Tenant, k.Thread)
		if err != nil {
			t.Fatalf("bind %q/%q: %v", k.Tenant, k.Thread, err)
		}
		if filepath.Dir(filepath.Dir(ti.Root)) != e.ws || filepath.Dir(filepath.Dir(ti.MountPath)) != e.mnt {
			t.Errorf("%q/%q: root %s, mount %s; want two levels below %s and %s", k.Tenant, k.Thread, ti.Root, ti.MountPath, e.ws, e.mnt)
		}
		if o, ok := roots[ti.Root]; ok {
			t.Errorf("%q/%q shares its folder %s with %q/%q", k.Tenant, k.Thread, ti.Root, o.Tenant, o.Thread)
		}
		if o, ok := mnts[ti.MountPath]; ok {
			t.Errorf("%q/%q shares its mount point %s with %q/%q", k.Tenant, k.Thread, ti.MountPath, o.Tenant, o.Thread)
		}
		roots[ti.Root], mnts[ti.MountPath] = k, k
		if n := mountsAt(t, ti.MountPath); n != 1 {
			t.Errorf("%q/%q: mounts at %s: %d, want 1", k.Tenant, k.Thread, ti.MountPath, n)
		}
		if err := os.WriteFile(filepath.Join(ti.MountPath, "id"), []byte(k.Tenant+"/"+k.Thread), 0o644); err != nil {
			t.Errorf("%q/%q: write through its mount: %v", k.Tenant, k.Thread, err)
		}
	}
	// Each wrote into its own folder only; nothing else was made.
	for root, k := range roots {
		if got, err := os.ReadFile(filepath.Join(root, "id")); err != nil || string(got) != k.Tenant+"/"+k.Thread {
			t.Errorf("%s: %q, %v; want %q", root, got, err, k.Tenant+"/"+k.Thread)
		}
	}
	if got := leaves(t, e.ws); len(got) != len(keys) {
		t.Errorf("workspace folders: %d (%v), want %d", len(got), got, len(keys))
	}
	if got := leaves(t, filepath.Join(e.ws, HomesDir)); len(got) != len(keys) {
		t.Errorf("home folders: %d (%v), want %d", len(got), got, len(keys))
	}
	if got := leaves(t, e.mnt); len(got) != len(keys) {
		t.Errorf("mount points: %d (%v), want %d", len(got), got, len(keys))
	}
	ents, err := os.ReadDir(e.data)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if !slices.Equal(names, []string{"meta", "mnt", "workspaces"}) {
		t.Errorf("data folder holds %v, want meta, mnt and workspaces only", names)
	}
	_, defMnt := e.paths(t, meta.ThreadKey{Thread: "t"})
	if mnts[defMnt] != (meta.ThreadKey{Thread: "t"}) {
		t.Errorf("the thread of tenant \"\" is not at %s", defMnt)
	}
	def, err := e.th.Bind(ctx, api.DefaultTenant, "t")
	if err != nil || def.MountPath != defMnt || def.Tenant != api.DefaultTenant {
		t.Errorf("tenant %q: %+v, %v; want the binding of tenant \"\" at %s", api.DefaultTenant, def, err, defMnt)
	}
	if n := mountsAt(t, def.MountPath); n != 1 {
		t.Errorf("mounts of the default tenant's thread: %d, want 1", n)
	}
	// An id the API refuses makes nothing either.
	if _, err := e.th.Bind(ctx, "acme", ""); statusOf(err) != "400 invalid" {
		t.Errorf("bind of an empty thread id: got %v (%s), want 400 invalid", err, statusOf(err))
	}
	if _, err := e.th.Bind(ctx, "acme", "\xff"); statusOf(err) != "400 invalid" {
		t.Errorf("bind of an id that is not UTF-8: got %v (%s), want 400 invalid", err, statusOf(err))
	}
	if got := leaves(t, e.ws); len(got) != len(keys) {
		t.Errorf("workspace folders after the refusals: %d, want %d", len(got), len(keys))
	}
}

// TestSettingsAJailCannotRunWithAreRefused: settings out of bounds are
// refused (400) before anything is made, locked or called.
func TestSettingsAJailCannotRunWithAreRefused(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	for _, s := range []meta.Settings{
		{Network: "bridge"},
		{MemoryBytes: 1 << 20},
		{MemoryBytes: -1},
		{MaxProcs: 1},
		{MaxProcs: MaxMaxProcs + 1},
		{CPUMillis: 1},
		{CPUMillis: MaxCPUMillis + 1},
		{MaxJobs: -1},
		{MaxJobs: MaxMaxJobs + 1},
		{DiskBytes: 1},
		{SnapshotBytes: -1},
		{Checkpoints: -1},
		{Checkpoints: 11},
		{JailIdleSeconds: -2},
		{CloseIdleSeconds: -2},
		{Env: map[string]string{"AGENT": "0"}},
		{Env: map[string]string{"A=B": "x"}},
	} {
		_, err := e.th.BindWith(ctx, "acme", "t", &s)
		if got := statusOf(err); got != "400 invalid" {
			t.Errorf("settings %+v: got %v (%s), want 400 invalid", s, err, got)
		}
	}
	if _, err := e.store.GetBinding(ctx, meta.ThreadKey{Tenant: "acme", Thread: "t"}); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("record after refused settings: %v, want none", err)
	}
	for _, base := range []string{e.ws, e.mnt} {
		if ents, err := os.ReadDir(base); err != nil || len(ents) != 0 {
			t.Errorf("%s after refused settings: %v, %v; want empty", base, ents, err)
		}
	}
	if ms := testenv.MountsUnder(t, e.data); len(ms) != 0 {
		t.Errorf("mounts: %v", ms)
	}
	if calls, evs := e.calls.take(), e.events.take(); len(calls) != 0 || len(evs) != 0 {
		t.Errorf("calls %v and events %v, want none", calls, eventTypes(evs))
	}
	if got := e.th.Headroom().Threads; got != 0 {
		t.Errorf("admission slots: %d, want 0", got)
	}
	if e.th.Locks() != 0 {
		t.Errorf("thread locks left: %d", e.th.Locks())
	}

	// Settings in bounds are kept.
	ok := meta.Settings{Network: "none", MemoryBytes: MinMemoryBytes, MaxProcs: MinMaxProcs, CPUMillis: 500,
		MaxJobs: 2, Checkpoints: 10, CloseIdleSeconds: -1, Env: map[string]string{"FOO": "bar"}}
	ti, err := e.th.BindWith(ctx, "acme", "t", &ok)
	if err != nil || !ti.Mounted || ti.Settings.MemoryBytes != MinMemoryBytes || ti.Settings.Env["FOO"] != "bar" {
		t.Fatalf("bind with settings in bounds: %+v, %v", ti, err)
	}
}

// TestTakeDownAsksStill: TakeDown takes a thread down (jail, jobs,
// mount; the record stays) only when still, asked under the thread's
// lock, says so; the next bind mounts it again.
func TestTakeDownAsksStill(t *testing.T) {
	e := newRoom(t)
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	_, mnt := e.paths(t, k)
	if e.th.sealOff {
		testenv.CannotRun(t, "the mount points' filesystem has no immutable flag")
	}
	if _, err := e.th.Bind(ctx, "acme", "t"); err != nil {
		t.Fatal(err)
	}
	locked := -1
	took, err := e.th.TakeDown(ctx, k, func(context.Context) bool {
		locked = e.th.Locks()
		return false
	})
	if err != nil || took {
		t.Fatalf("take down when still says no: %v, %v; want not taken", took, err)
	}
	if locked != 1 {
		t.Errorf("locks held while still ran: %d, want 1 (the thread's)", locked)
	}
	if !e.th.Mounted(k) || mountsAt(t, mnt) != 1 {
		t.Error("a thread still spared is not mounted")
	}
	if calls := e.calls.take(); len(calls) != 0 {
		t.Errorf("calls when spared: %v", calls)
	}

	took, err = e.th.TakeDown(ctx, k, func(context.Context) bool { return true })
	if err != nil || !took {
		t.Fatalf("take down: %v, %v; want taken", took, err)
	}
	if got := e.calls.take(); !slices.Equal(got, []string{"CloseJail t", "EndThread t"}) {
		t.Errorf("calls: %v, want CloseJail then EndThread", got)
	}
	if e.th.Mounted(k) || mountsAt(t, mnt) != 0 {
		t.Error("a thread taken down is still mounted")
	}
	if err := os.WriteFile(filepath.Join(mnt, "lost"), nil, 0o644); !errors.Is(err, syscall.EPERM) {
		t.Errorf("write in the mount point of a thread taken down: got %v, want EPERM", err)
	}
	if b, err := e.store.GetBinding(ctx, k); err != nil || b.State != meta.StateBound {
		t.Errorf("record after take down: %+v, %v; want bound, kept", b, err)
	}
	if e.th.Locks() != 0 {
		t.Errorf("locks left: %d", e.th.Locks())
	}
	if ti, err := e.th.Bind(ctx, "acme", "t"); err != nil || !ti.Mounted || mountsAt(t, mnt) != 1 {
		t.Errorf("bind after take down: %+v, %v; want mounted again", ti, err)
	}
}

// TestHandlersAnswer: the thread calls' handlers answer what the room
// does, and refuse what it refuses.
func TestHandlersAnswer(t *testing.T) {
	e := newRoom(t)
	h := NewHandlers(e.th)
	p := call.Params{Tenant: "acme", Thread: "t"}
	req := func(method, body string) *http.Request {
		r, err := http.NewRequestWithContext(context.Background(), method, "/", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	v, err := h.Bind(req("POST", `{"settings":{"network":"bridge"}}`), p)
	if statusOf(err) != "400 invalid" {
		t.Errorf("bind with bad settings: %v, %v; want 400 invalid", v, err)
	}
	v, err = h.Bind(req("POST", ""), p)
	br, ok := v.(api.BindResponse)
	if err != nil || !ok || !br.Binding.Mounted || br.MountPath == "" {
		t.Fatalf("bind: %+v, %v", v, err)
	}
	v, err = h.Show(req("GET", ""), p)
	if tr, ok := v.(api.ThreadResponse); err != nil || !ok || tr.Binding.MountPath != br.MountPath {
		t.Errorf("show: %+v, %v", v, err)
	}
	v, err = h.Close(req("POST", ""), p)
	if tr, ok := v.(api.ThreadResponse); err != nil || !ok || tr.Binding.State != meta.StateClosed {
		t.Errorf("close: %+v, %v", v, err)
	}
	v, err = h.Delete(req("DELETE", ""), p)
	if dr, ok := v.(api.DeleteResponse); err != nil || !ok || dr.Deleted != (meta.ThreadKey{Tenant: "acme", Thread: "t"}) {
		t.Errorf("delete: %+v, %v", v, err)
	}
	if _, err := h.Show(req("GET", ""), p); statusOf(err) != "404 not_found" {
		t.Errorf("show after delete: %v, want 404 not_found", err)
	}
}
