package health_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/health"
	"warren/gateway/hosts"
	"warren/gateway/quota"
	"warren/gateway/threadlimit"
	"warren/jail"
	"warren/meta"
	"warren/meta/badger"
)

// The health room's promises, with fakes of the threads, the jails, the
// jobs and the checkpoints, and the real store (Badger), hosts and
// quotas rooms.

type fakeThreads struct {
	serving  bool
	headroom threadlimit.Headroom
	restore  int
	requests uint64
}

func (f *fakeThreads) Serving() bool                          { return f.serving }
func (f *fakeThreads) Headroom() threadlimit.Headroom         { return f.headroom }
func (f *fakeThreads) RestoreLeft() int                       { return f.restore }
func (f *fakeThreads) Requests(meta.ThreadKey) (uint64, bool) { return f.requests, true }
func (f *fakeThreads) RootOf(b meta.Binding) (string, error)  { return b.Root, nil }
func (f *fakeThreads) HomeOf(b meta.Binding) (string, error)  { return b.Root + ".home", nil }

type fakeJails struct{}

func (fakeJails) Live() (int, int)                 { return 1, 8 }
func (fakeJails) JailOf(meta.ThreadKey) *jail.Jail { return nil }

type fakeJobs struct{ running int }

func (f fakeJobs) Running(meta.ThreadKey) int { return f.running }

type fakeCheckpoints struct{}

func (fakeCheckpoints) SnapshotQuota(s meta.Settings) int64 { return 7 << 20 }

// downStore is a store that does not answer ListHosts.
type downStore struct{ meta.Store }

var errDown = errors.New("store down")

func (downStore) ListHosts(context.Context) ([]meta.Host, error) { return nil, errDown }

type roomEnv struct {
	store   meta.Store
	threads *fakeThreads
	data    string
}

func newEnv(t *testing.T) *roomEnv {
	t.Helper()
	data := t.TempDir()
	s, err := badger.Open(context.Background(), filepath.Join(data, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return &roomEnv{store: s, data: data, threads: &fakeThreads{serving: true}}
}

// startHosts starts the hosts room of id on store; "" pins nothing.
func startHosts(t *testing.T, store meta.Store, id string) *hosts.Hosts {
	t.Helper()
	h, err := hosts.Start(context.Background(), hosts.Config{
		HostID: id, RenewEvery: 50 * time.Millisecond, ExpiresAfter: 5 * time.Second,
		Store: store, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatalf("start hosts of %q: %v", id, err)
	}
	t.Cleanup(h.Close)
	return h
}

// room is the health room of host id over e's store (or store, if not
// nil).
func (e *roomEnv) room(t *testing.T, id string, h *hosts.Hosts, store meta.Store) *health.Health {
	t.Helper()
	if store == nil {
		store = e.store
	}
	q, err := quota.Start(quota.Config{WorkspacesDir: e.data, StoreDir: filepath.Join(e.data, "meta"), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return health.New(health.Config{
		Store: store, HostID: id, DataDir: e.data, WorkspacesDir: e.data,
		Threads: e.threads, Jails: fakeJails{}, Jobs: fakeJobs{running: 1}, Hosts: h, Quotas: q, Checkpoints: fakeCheckpoints{},
	})
}

// failing returns the names of the checks that fail.
func failing(rd api.Readiness) []string {
	var out []string
	for _, c := range rd.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

func check(rd api.Readiness, name string) api.ReadyCheck {
	for _, c := range rd.Checks {
		if c.Name == name {
			return c
		}
	}
	return api.ReadyCheck{Name: name, Detail: "(missing)"}
}

// status answers GET /readyz through the handler and returns its status
// and body.
func status(t *testing.T, h *health.Health) (int, string) {
	t.Helper()
	v, err := health.NewHandlers(h).Ready(httptest.NewRequest("GET", "/readyz", nil), call.Params{})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := v.(interface {
		ServeStream(http.ResponseWriter, *http.Request)
	})
	if !ok {
		t.Fatalf("readyz answered %T, not a stream with its own status", v)
	}
	w := httptest.NewRecorder()
	s.ServeStream(w, httptest.NewRequest("GET", "/readyz", nil))
	return w.Code, w.Body.String()
}

// TestReadyWhenEverythingAnswers: with the store answering, the lease
// held (or no host id), room on disk and descriptors, and a new thread
// admitted, every check passes: 200.
func TestReadyWhenEverythingAnswers(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"", "web-1"} {
		h := e.room(t, id, startHosts(t, e.store, id), nil)
		rd := h.Readiness(context.Background())
		if !rd.Ready || len(failing(rd)) != 0 {
			t.Errorf("host %q: not ready: %+v", id, rd)
		}
		var names []string
		for _, c := range rd.Checks {
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != "serving,store,lease,disk,descriptors,admission,restore" {
			t.Errorf("host %q: checks %s", id, got)
		}
		if code, body := status(t, h); code != http.StatusOK {
			t.Errorf("host %q: /readyz answered %d: %s", id, code, body)
		}
	}
}

// TestUnreadyNamesTheFailingCheck: a store that does not answer, a
// daemon that is stopping, or an admission that refuses new threads
// makes the daemon unready (503), with that check, and only it, failing
// and saying why.
func TestUnreadyNamesTheFailingCheck(t *testing.T) {
	e := newEnv(t)
	hs := startHosts(t, e.store, "")
	for _, c := range []struct {
		name   string
		store  meta.Store
		change func()
		detail string
	}{
		{"store", downStore{e.store}, func() {}, errDown.Error()},
		{"serving", nil, func() { e.threads.serving = false }, "the daemon is stopping"},
		{"admission", nil, func() { e.threads.headroom.Refused = "This server serves 3 threads, its limit (--max-threads)." }, "new threads refused: This server serves 3 threads"},
	} {
		*e.threads = fakeThreads{serving: true}
		c.change()
		h := e.room(t, "", hs, c.store)
		rd := h.Readiness(context.Background())
		if rd.Ready {
			t.Errorf("%s failing: ready", c.name)
		}
		if got := failing(rd); len(got) != 1 || got[0] != c.name {
			t.Errorf("%s failing: failing checks %v, want only %s", c.name, got, c.name)
		}
		if d := check(rd, c.name).Detail; !strings.Contains(d, c.detail) {
			t.Errorf("%s failing: detail %q, want it to say %q", c.name, d, c.detail)
		}
		if code, _ := status(t, h); code != http.StatusServiceUnavailable {
			t.Errorf("%s failing: /readyz answered %d, want 503", c.name, code)
		}
	}
}

// TestRestoringIsReady: threads of a former run still to be mounted
// again are counted, and do not make the daemon unready.
func TestRestoringIsReady(t *testing.T) {
	e := newEnv(t)
	e.threads.restore = 3
	rd := e.room(t, "", startHosts(t, e.store, ""), nil).Readiness(context.Background())
	if !rd.Ready || rd.Restoring != 3 || !strings.Contains(check(rd, "restore").Detail, "3 threads") {
		t.Errorf("restoring 3: %+v", rd)
	}
}

// TestUsageOfAThread: a thread with no binding is 404 not_found; one
// with a binding gets its figures: its folder and its home on disk, its
// quotas, its checkpoints, its jobs, its mount's requests.
func TestUsageOfAThread(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	h := e.room(t, "", startHosts(t, e.store, ""), nil)
	e.threads.requests = 42

	if _, err := h.Usage(ctx, "acme", "none"); err == nil {
		t.Error("usage of a thread with no binding: no error")
	} else if s, c := call.Classify(err); s != http.StatusNotFound || c != api.CodeNotFound {
		t.Errorf("usage of a thread with no binding: %v, classified %d %s; want 404 not_found", err, s, c)
	}

	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root := filepath.Join(e.data, "workspaces", "acme", "t")
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a": "abc", "sub/b": "hello"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// Its home, apart.
	if err := os.MkdirAll(filepath.Join(root+".home", ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root+".home", ".cache", "x"), []byte("1234567"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Root: root, State: meta.StateBound,
		Settings: meta.Settings{DiskBytes: 64 << 20}, BoundAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.PutHistory(ctx, meta.History{ThreadKey: k, NextSeq: 3, Checkpoints: []meta.Checkpoint{
		{ID: "cp-1", Seq: 1, Tree: "aa", Bytes: 100, CreatedAt: time.Now().UTC()},
		{ID: "cp-2", Seq: 2, Tree: "bb", Bytes: 200, CreatedAt: time.Now().UTC()},
	}}); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(2) {
		if _, err := e.store.CreateJob(ctx, meta.Job{ThreadKey: k, Seq: seq + 1, Label: "true", StartedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}

	u, err := h.Usage(ctx, "acme", "t")
	if err != nil {
		t.Fatalf("usage: %v", err)
	}
	want := api.Usage{Tenant: "acme", Thread: "t",
		DiskBytes: 8, DiskFiles: 4, HomeBytes: 7, HomeFiles: 2, DiskQuotaBytes: 64 << 20,
		SnapshotBytes: 300, SnapshotQuotaBytes: 7 << 20, Checkpoints: 2,
		JobsRunning: 1, Jobs: 2, FUSERequests: 42}
	if u != want {
		t.Errorf("usage:\n got %+v\nwant %+v", u, want)
	}
}

// TestUsagePinnedElsewhere: a thread another live host owns is refused
// (409 pinned, naming the host and its folder); its owner answers.
func TestUsagePinnedElsewhere(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	web1, web2 := startHosts(t, e.store, "web-1"), startHosts(t, e.store, "web-2")
	k := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	root := filepath.Join(e.data, "workspaces", "acme", "t")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := e.store.CreateBinding(ctx, meta.Binding{ThreadKey: k, HostID: "web-1", Root: root, State: meta.StateBound, BoundAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := web1.Claim(ctx, k, &b); err != nil {
		t.Fatal(err)
	}

	_, err = e.room(t, "web-2", web2, nil).Usage(ctx, "acme", "t")
	if s, c := call.Classify(err); s != http.StatusConflict || c != api.CodePinned {
		t.Fatalf("usage on web-2: %v, classified %d %s; want 409 pinned", err, s, c)
	}
	if msg := err.Error(); !strings.Contains(msg, "web-1") || !strings.Contains(msg, root) {
		t.Errorf("refusal %q: want it to name web-1 and %s", msg, root)
	}
	if u, err := e.room(t, "web-1", web1, nil).Usage(ctx, "acme", "t"); err != nil || u.Thread != "t" {
		t.Errorf("usage on web-1, the owner: %+v, %v", u, err)
	}
}

// TestUnreadyWhenFenced: a host whose lease ran out is unready, with the
// lease check failing.
func TestUnreadyWhenFenced(t *testing.T) {
	e := newEnv(t)
	hs, err := hosts.Start(context.Background(), hosts.Config{
		HostID: "web-1", RenewEvery: 50 * time.Millisecond, ExpiresAfter: 600 * time.Millisecond,
		Store: e.store, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.room(t, "web-1", hs, nil)
	if rd := h.Readiness(context.Background()); !rd.Ready {
		t.Fatalf("not ready under a valid lease: %+v", rd)
	}
	hs.Close() // no more heartbeats: the lease runs out
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ok, _ := hs.Valid(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease still valid 10s after its heartbeats stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rd := h.Readiness(context.Background())
	if got := failing(rd); rd.Ready || len(got) != 1 || got[0] != "lease" || !strings.Contains(check(rd, "lease").Detail, "fenced") {
		t.Errorf("fenced: %+v, want unready with the lease check failing", rd)
	}
}
