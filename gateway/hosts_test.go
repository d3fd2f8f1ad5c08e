package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/gateway/hosts"
	"warren/gateway/jails"
	"warren/gateway/threads"
	"warren/internal/testenv"
	"warren/meta"
)

// formerHost plays a host that bound threads and died: their bindings,
// a lease that ran out, and jobs it left running.
func formerHost(t *testing.T, store meta.Store, host string, threads map[string]string) {
	t.Helper()
	ctx := context.Background()
	lease, err := store.Heartbeat(ctx, host, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for thread, root := range threads {
		k := meta.ThreadKey{Tenant: "acme", Thread: thread}
		if _, err := store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Kind: meta.KindHost, HostID: host, Root: root,
			MountPath: root + "-mnt", BoundAt: time.Now(), State: meta.StateBound}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Pin(ctx, k, host, lease); err != nil {
			t.Fatal(err)
		}
	}
	// Its lease runs out.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		hs, _ := store.ListHosts(ctx)
		if len(hs) > 0 && !hs[0].Alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the former host's lease did not run out")
		}
	}
}

// formerRoot makes a workspace root of a former host's data folder.
func formerRoot(t *testing.T, thread string, files map[string]string) string {
	t.Helper()
	testenv.RequireRoot(t) // the files are given to the jail's user
	root, err := threads.WorkspaceRoot(filepath.Join(t.TempDir(), "data", "workspaces"), "acme", thread)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		// As the jail's user made it on the former host.
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(root, name), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestTakeOver: the threads of a host whose lease ran out are taken over
// by the next gateway that gets a call for them: resumed in their folder
// where it is reachable, gone (with its message and a stranded event)
// where not; the jobs the host left running are noted once each.
func TestTakeOver(t *testing.T) {
	store := newStore(t)
	ctx := context.Background()
	resumed := formerRoot(t, "resumed", map[string]string{"notes.txt": "from web-1\n"})
	lost := filepath.Join(t.TempDir(), "data", "workspaces", "acme", "lost")
	formerHost(t, store, "web-1", map[string]string{"resumed": resumed, "lost": lost})
	k := meta.ThreadKey{Tenant: "acme", Thread: "resumed"}
	for i, job := range []meta.Job{
		// One on this machine, whose processes are gone already; one of
		// another machine; one that had ended.
		{Machine: hosts.MachineID(), Cgroup: "/sys/fs/cgroup/pids/warren/jail-999999999/cmd-1", Running: true},
		{Machine: "elsewhere", Cgroup: "/sys/fs/cgroup/pids/warren/jail-1/cmd-1", Running: true},
		{Machine: hosts.MachineID(), Running: false},
	} {
		seq, _ := store.NextJobSeq(ctx, k)
		job.ThreadKey, job.Seq, job.HostID, job.Label, job.StartedAt = k, seq, "web-1", "job", time.Now()
		if _, err := store.CreateJob(ctx, job); err != nil {
			t.Fatal(i, err)
		}
	}

	env := startEnv(t, Config{HostID: "web-2", Store: store, RenewEvery: 200 * time.Millisecond, ExpiresAfter: 2 * time.Second})
	evs := subscribe(t, env, "")
	var out strings.Builder
	code, err := env.c.Exec(ctx, "acme", "resumed", api.ExecRequest{Command: "cat notes.txt; echo more >> notes.txt"}, &out, nil)
	if err != nil || code != 0 || out.String() != "from web-1\n" {
		t.Fatalf("first call after the takeover: exit %d, %v, %q", code, err, out.String())
	}
	if b, err := os.ReadFile(filepath.Join(resumed, "notes.txt")); err != nil || string(b) != "from web-1\nmore\n" {
		t.Errorf("the resumed folder holds %q, %v", b, err)
	}
	ti, err := env.c.Thread(ctx, "acme", "resumed")
	if err != nil || ti.HostID != "web-2" || ti.Root != resumed || ti.Owner != "web-2" {
		t.Errorf("binding after the takeover: %+v, %v", ti, err)
	}
	jobs, err := env.c.Jobs(ctx, "acme", "resumed")
	if err != nil || len(jobs) != 3 {
		t.Fatalf("jobs: %+v, %v", jobs, err)
	}
	for i, want := range []string{
		"Background job bash-1 was stopped: it ran on a host before the session moved to this one.",
		"Background job bash-2 may still run: it ran on a host before this one, and this host cannot stop it.",
		"",
	} {
		if jobs[i].Note != want || jobs[i].Running || !jobs[i].Ended {
			t.Errorf("job %s: note %q, running %v, ended %v; want note %q", jobs[i].ID, jobs[i].Note, jobs[i].Running, jobs[i].Ended, want)
		}
	}
	// Later calls note nothing again.
	if _, err := env.c.Exec(ctx, "acme", "resumed", api.ExecRequest{Command: "true"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(env.logBuf.String(), "job of a former host noted"); n != 2 {
		t.Errorf("%d job notes, want 2", n)
	}

	// A thread whose folder is not reachable is gone, for good.
	wantGone := "The workspace of this thread, " + lost + " on the host web-1, is gone, so the tools cannot work on it."
	for range 2 {
		_, err := env.c.Exec(ctx, "acme", "lost", api.ExecRequest{Command: "true"}, nil, nil)
		var apiErr *api.APIError
		if !errors.Is(err, api.ErrGone) || !errors.As(err, &apiErr) || apiErr.Status != 410 || apiErr.Message != wantGone {
			t.Errorf("a call for a lost thread: %v", err)
		}
	}
	stranded := 0
	for deadline := time.After(5 * time.Second); stranded == 0; {
		select {
		case ev := <-evs:
			if ev.Type == api.EventThreadStranded && ev.Thread == "lost" && ev.Message == wantGone {
				stranded++
			}
		case <-deadline:
			t.Fatal("no stranded event")
		}
	}
}

// TestTakeOverFresh: configured so, a gateway gives a taken-over thread
// whose folder it cannot reach a fresh workspace, seeded by its command.
func TestTakeOverFresh(t *testing.T) {
	store := newStore(t)
	formerHost(t, store, "web-1", map[string]string{"t1": "/nonexistent/data/workspaces/acme/t1"})
	env := startEnv(t, Config{HostID: "web-2", Store: store, OnUnreachable: UnreachableFresh, SeedCommand: "echo seeded > SEED"})
	var out strings.Builder
	code, err := env.c.Exec(context.Background(), "acme", "t1", api.ExecRequest{Command: "ls"}, &out, nil)
	if err != nil || code != 0 || out.String() != "SEED\n" {
		t.Fatalf("a fresh workspace: exit %d, %v, %q", code, err, out.String())
	}
	ti, _ := env.c.Thread(context.Background(), "acme", "t1")
	if ti.HostID != "web-2" || !strings.HasPrefix(ti.Root, env.cfg.DataDir) {
		t.Errorf("binding of the fresh workspace: %+v", ti)
	}
}

// TestUnpin: refused while the owner lives; once it is gone, it moves the
// thread here at once.
func TestUnpin(t *testing.T) {
	store := newStore(t)
	ctx := context.Background()
	root := formerRoot(t, "t1", map[string]string{"f": "x"})
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	if _, err := store.CreateBinding(ctx, meta.Binding{ThreadKey: k, Kind: meta.KindHost, HostID: "web-1", Root: root,
		BoundAt: time.Now(), State: meta.StateBound}); err != nil {
		t.Fatal(err)
	}
	lease, _ := store.Heartbeat(ctx, "web-1", 0, 2*time.Second)
	if _, err := store.Pin(ctx, k, "web-1", lease); err != nil {
		t.Fatal(err)
	}
	env := startEnv(t, Config{HostID: "web-2", Store: store})
	if _, err := env.c.Unpin(ctx, "acme", "t1"); !errors.Is(err, api.ErrPinned) || !strings.Contains(err.Error(), "pinned to the live host web-1") {
		t.Fatalf("unpin while the owner lives: %v", err)
	}
	hosts, err := env.c.Hosts(ctx)
	if err != nil || len(hosts) != 2 || hosts[0].ID != "web-1" || !hosts[0].Alive || hosts[1].ID != "web-2" || !hosts[1].Alive {
		t.Errorf("hosts: %+v, %v", hosts, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ti, err := env.c.Unpin(ctx, "acme", "t1")
		if err == nil {
			if ti.HostID != "web-2" || !ti.Mounted || ti.Root != root {
				t.Errorf("unpinned: %+v", ti)
			}
			break
		}
		if !errors.Is(err, api.ErrPinned) || time.Now().After(deadline) {
			t.Fatalf("unpin once the owner is gone: %v", err)
		}
	}
}

// subscribe follows the gateway's events of one thread ("" for all).
func subscribe(t *testing.T, env *testEnv, thread string) <-chan api.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	evs := make(chan api.Event, 1024)
	sub, err := env.g.events.Subscribe("", thread)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer sub.Cancel()
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				if !errors.Is(err, api.ErrClosed) && ctx.Err() == nil {
					t.Errorf("next event: %v", err)
				}
				return
			}
			evs <- ev
		}
	}()
	return evs
}

// BenchmarkOwnershipCheck measures what a call pays to check that this
// gateway owns its thread, once the thread is pinned: a map look-up under
// a mutex and a clock read, no store round trip.
func BenchmarkOwnershipCheck(b *testing.B) {
	store := newStore(b)
	env := startEnv(b, Config{HostID: "web-1", Store: store})
	ctx := context.Background()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	if err := env.g.hosts.Claim(ctx, k, nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := env.g.hosts.Claim(ctx, k, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFenceOnLostLease: a gateway that finds its lease gone (here another
// run of its host id took the host's lease over) takes down every thread
// it served, jail, jobs and mount, tells it (thread.fenced), and serves it
// again only after pinning it anew.
func TestFenceOnLostLease(t *testing.T) {
	store := newStore(t)
	ctx := context.Background()
	env := startEnv(t, Config{HostID: "web-1", Store: store, RenewEvery: 100 * time.Millisecond, ExpiresAfter: 2 * time.Second})
	evs := subscribe(t, env, "t1")
	if _, err := env.c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 300"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Heartbeat(ctx, "web-1", 0, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// The fence tells a thread once it took it down.
	ev := waitEventOf(t, evs, api.EventThreadFenced, "t1")
	if ev.Tenant != "acme" || !strings.Contains(ev.Message, "lease") {
		t.Errorf("fence event: %+v", ev)
	}
	if ti, err := env.c.Thread(ctx, "acme", "t1"); err != nil || ti.Mounted {
		t.Errorf("after the fence: %+v, %v; want not mounted", ti, err)
	}
	info := waitJobEnd(t, env.c, "t1", "bash-1")
	if *info.ExitCode == 0 {
		t.Errorf("the job of a fenced thread: %+v", info)
	}
	// Pinned again at its next call, and served.
	var out strings.Builder
	if code, err := env.c.Exec(ctx, "acme", "t1", api.ExecRequest{Command: "echo back"}, &out, nil); err != nil || code != 0 || out.String() != "back\n" {
		t.Errorf("after the fence: exit %d, %v, %q", code, err, out.String())
	}
}

// TestFenceSparesRepinned: a fence that reaches a thread a call pinned
// again under the new lease leaves it served, jail, jobs and mount, and
// takes down only the threads not pinned again.
func TestFenceSparesRepinned(t *testing.T) {
	testenv.RequireRootFUSE(t)
	store := newStore(t)
	ctx := context.Background()
	env := startEnv(t, Config{HostID: "web-1", Store: store, RenewEvery: 100 * time.Millisecond, ExpiresAfter: 2 * time.Second})
	evs := subscribe(t, env, "")
	k1 := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	if _, err := env.c.Spawn(ctx, "acme", "t1", api.SpawnRequest{Command: "sleep 300"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.Exec(ctx, "acme", "t2", api.ExecRequest{Command: "true"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	old, held := env.g.hosts.Holds(k1)
	if !held {
		t.Fatal("t1 not pinned")
	}
	jailOf := func() *jails.ThreadJail {
		tj, _ := env.g.jails.Get(k1)
		return tj
	}
	j1 := jailOf()
	if j1 == nil {
		t.Fatal("t1 has no jail")
	}
	// The fence goes through the threads in order, t1 first: holding
	// t1's lock keeps it there while a call pins t1 again, as a request
	// that came in between the new lease and the fence would.
	unlock, err := env.g.threads.Lock(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Heartbeat(ctx, "web-1", 0, 2*time.Second); err != nil {
		unlock()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if id, _ := env.g.hosts.Holds(k1); id != 0 && id != old {
			break
		}
		if time.Now().After(deadline) {
			unlock()
			t.Fatal("no new lease")
		}
	}
	err = env.g.hosts.Claim(ctx, k1, nil)
	unlock()
	if err != nil {
		t.Fatalf("pin t1 again: %v", err)
	}
	// A fence event of t1 would come before t2's: waitEventOf fails on it.
	waitEventOf(t, evs, api.EventThreadFenced, "t2")
	if ti, err := env.c.Thread(ctx, "acme", "t1"); err != nil || !ti.Mounted {
		t.Errorf("t1 after the fence: %+v, %v; want mounted", ti, err)
	}
	if ti, err := env.c.Thread(ctx, "acme", "t2"); err != nil || ti.Mounted {
		t.Errorf("t2 after the fence: %+v, %v; want not mounted", ti, err)
	}
	// The jail (and so its job) is the one from before the fence. Not the
	// job's state: in a process where another gateway ran before, a new
	// jail's init is sometimes killed by something outside the lease (seen
	// before this test existed), which would make that check flaky.
	if j := jailOf(); j != j1 {
		t.Errorf("t1's jail after the fence: %p, want %p", j, j1)
	}
}

// waitEventOf returns the first event of type typ of thread, skipping
// others, but failing the test at a thread.fenced event of another thread
// on the way.
func waitEventOf(t *testing.T, evs <-chan api.Event, typ api.EventType, thread string) api.Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-evs:
			if ev.Type == api.EventThreadFenced && ev.Thread != thread {
				t.Errorf("fenced %s while waiting for %s of %s", ev.Thread, typ, thread)
			}
			if ev.Type == typ && ev.Thread == thread {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event of %s", typ, thread)
			return api.Event{}
		}
	}
}

// TestSharedWorkspaces: servers without host ids pin nothing; sharing a
// store and a workspaces folder (a shared disk), each binds any thread
// there and serves the same files.
func TestSharedWorkspaces(t *testing.T) {
	store := newStore(t)
	shared := filepath.Join(t.TempDir(), "shared")
	a := startEnv(t, Config{Store: store, WorkspacesDir: shared})
	b := startEnv(t, Config{Store: store, WorkspacesDir: shared})
	ctx := context.Background()
	if _, err := a.c.Files().Write(ctx, "acme", "t1", api.WriteFileRequest{Path: "notes.txt", Content: "from a\n"}); err != nil {
		t.Fatal(err)
	}
	got, err := b.c.Files().Read(ctx, "acme", "t1", api.ReadFileRequest{Path: "notes.txt"})
	if err != nil || got.Content != "from a\n" {
		t.Fatalf("the other server reads %+v, %v", got, err)
	}
	ti, err := b.c.Thread(ctx, "acme", "t1")
	if err != nil || !strings.HasPrefix(ti.Root, shared+"/") || ti.HostID != "" || ti.Owner != "" {
		t.Errorf("binding on the shared disk: %+v, %v", ti, err)
	}
	// An inspection mount may not go into the shared folder.
	if _, err := a.c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "t1", Path: filepath.Join(shared, "acme")}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("an inspection mount in the workspaces folder: %v", err)
	}
}

// lostAnswerStore is the real store whose CreateBinding writes and then
// reports the store unavailable, as a write whose answer was lost in an
// etcd election would.
type lostAnswerStore struct {
	meta.Store
}

func (s lostAnswerStore) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	if _, err := s.Store.CreateBinding(ctx, b); err != nil {
		return meta.Binding{}, err
	}
	return meta.Binding{}, fmt.Errorf("create binding: %w", meta.ErrUnavailable)
}

// TestBindLostAnswer: a bind whose record was written but whose answer
// was lost fails with 503, keeps the folder, and the retry serves the
// thread (not "gone").
func TestBindLostAnswer(t *testing.T) {
	env := startEnv(t, Config{Store: lostAnswerStore{newStore(t)}})
	ctx := context.Background()
	_, err := env.c.Bind(ctx, "acme", "t1")
	var apiErr *api.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 {
		t.Fatalf("bind whose answer was lost: %v, want 503", err)
	}
	ti, err := env.c.Bind(ctx, "acme", "t1")
	if err != nil || !ti.Binding.Mounted {
		t.Fatalf("the retry: %+v, %v; want the thread served", ti, err)
	}
}
