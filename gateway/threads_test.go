package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/meta"
)

// failingStore fails chosen writes, to see that a bind undoes its steps.
type failingStore struct {
	meta.Store
	failCreate, failUpdate error
}

func (s *failingStore) CreateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	if s.failCreate != nil {
		return meta.Binding{}, s.failCreate
	}
	return s.Store.CreateBinding(ctx, b)
}

func (s *failingStore) UpdateBinding(ctx context.Context, b meta.Binding) (meta.Binding, error) {
	if s.failUpdate != nil {
		return meta.Binding{}, s.failUpdate
	}
	return s.Store.UpdateBinding(ctx, b)
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return err == nil
}

func TestBindIdempotent(t *testing.T) {
	env := startEnv(t, Config{HostID: "host-a"})
	ctx := context.Background()

	first, err := env.c.Bind(ctx, "acme", "t-1")
	if err != nil {
		t.Fatalf("first bind: %v", err)
	}
	if first.Binding.Kind != meta.KindHost || first.Binding.HostID != "host-a" || first.Binding.State != meta.StateBound {
		t.Errorf("got binding %+v, want kind host, host id host-a, state bound", first.Binding)
	}
	if first.Binding.BoundAt.IsZero() {
		t.Errorf("BoundAt is zero")
	}
	if !exists(t, first.Binding.Root) || !exists(t, first.MountPath) {
		t.Errorf("root %s or mount path %s missing", first.Binding.Root, first.MountPath)
	}

	// Many callers at once: the same binding, one mount.
	var wg sync.WaitGroup
	results := make([]api.BindResponse, 16)
	errs := make([]error, len(results))
	for i := range results {
		wg.Go(func() { results[i], errs[i] = env.c.Bind(ctx, "acme", "t-1") })
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("bind %d: %v", i, errs[i])
		}
		if results[i].Binding.Revision != first.Binding.Revision || !results[i].Binding.BoundAt.Equal(first.Binding.BoundAt) {
			t.Errorf("bind %d: got revision %d bound at %v, want %d and %v", i,
				results[i].Binding.Revision, results[i].Binding.BoundAt, first.Binding.Revision, first.Binding.BoundAt)
		}
	}
	if live, made := env.live(t), env.m.made(); len(live) != 1 || made != 1 {
		t.Errorf("got %d live mounts (%v) from %d mounts, want 1 from 1", len(live), live, made)
	}
	if n := env.g.threads.Locks(); n != 0 {
		t.Errorf("got %d thread locks left, want 0", n)
	}
}

func TestBindConcurrentThreads(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = env.c.Bind(ctx, fmt.Sprintf("tenant-%d", i%3), fmt.Sprintf("t-%d", i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("bind %d: %v", i, err)
		}
	}
	if live := env.live(t); len(live) != len(errs) {
		t.Errorf("got %d mounts, want %d: %v", len(live), len(errs), live)
	}
}

func TestFailedBindLeavesNothing(t *testing.T) {
	mountErr := errors.New("no mount today")
	storeErr := errors.New("store is down")
	tests := []struct {
		name  string
		setup func(m *tapMounter, s *failingStore)
	}{
		{"mount fails", func(m *tapMounter, _ *failingStore) {
			m.setFailMount(func(string) error { return mountErr })
		}},
		// The mount is made, for real, and must be undone.
		{"record fails", func(_ *tapMounter, s *failingStore) { s.failCreate = storeErr }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &failingStore{Store: newStore(t)}
			env := startEnv(t, Config{Store: s})
			ctx := context.Background()
			tt.setup(env.m, s)

			_, err := env.c.Bind(ctx, "acme", "t-1")
			if err == nil {
				t.Fatal("bind succeeded, want an error")
			}
			root, mnt, err := env.g.threads.Paths(meta.ThreadKey{Tenant: "acme", Thread: "t-1"})
			if err != nil {
				t.Fatal(err)
			}
			if exists(t, root) || exists(t, mnt) {
				t.Errorf("after a failed bind: root exists %v, mount point exists %v; want neither", exists(t, root), exists(t, mnt))
			}
			if live := env.live(t); len(live) != 0 {
				t.Errorf("got %d live mounts after a failed bind, want 0: %v", len(live), live)
			}
			if _, err := env.c.Thread(ctx, "acme", "t-1"); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("Thread after a failed bind: got %v, want ErrNotFound", err)
			}

			// Not remembered: the next call tries again and succeeds.
			env.m.setFailMount(nil)
			s.failCreate = nil
			br, err := env.c.Bind(ctx, "acme", "t-1")
			if err != nil {
				t.Fatalf("retried bind: %v", err)
			}
			if !br.Binding.Mounted || br.Binding.Error != "" {
				t.Errorf("retried bind: got mounted=%v error=%q, want mounted and no error", br.Binding.Mounted, br.Binding.Error)
			}
		})
	}
}

func TestCloseAndDelete(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	br, err := env.c.Bind(ctx, "acme", "t-1")
	if err != nil {
		t.Fatal(err)
	}
	root, mnt := br.Binding.Root, br.MountPath
	if err := os.WriteFile(root+"/kept.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	closed, err := env.c.CloseThread(ctx, "acme", "t-1")
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	if closed.State != meta.StateClosed || closed.Mounted || closed.ClosedAt.IsZero() {
		t.Errorf("after close: got state %q mounted %v closedAt %v, want closed, unmounted, a time", closed.State, closed.Mounted, closed.ClosedAt)
	}
	if isMounted(t, mnt) {
		t.Errorf("%s still mounted after close", mnt)
	}
	if !exists(t, root+"/kept.txt") {
		t.Errorf("close removed the workspace's files")
	}
	// Closing again is harmless.
	if _, err := env.c.CloseThread(ctx, "acme", "t-1"); err != nil {
		t.Errorf("second close: %v", err)
	}

	// The next call that needs the thread binds it again, same folder.
	again, err := env.c.Bind(ctx, "acme", "t-1")
	if err != nil {
		t.Fatalf("bind after close: %v", err)
	}
	if again.Binding.State != meta.StateBound || !again.Binding.Mounted || again.Binding.Root != root {
		t.Errorf("bind after close: got %+v, want bound, mounted, root %s", again.Binding, root)
	}

	if err := env.c.DeleteThread(ctx, "acme", "t-1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if exists(t, root) || exists(t, mnt) || isMounted(t, mnt) {
		t.Errorf("after delete: root exists %v, mount point exists %v, mounted %v; want none", exists(t, root), exists(t, mnt), isMounted(t, mnt))
	}
	if _, err := env.c.Thread(ctx, "acme", "t-1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Thread after delete: got %v, want ErrNotFound", err)
	}
	if err := env.c.DeleteThread(ctx, "acme", "t-1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("second delete: got %v, want ErrNotFound", err)
	}
}

// TestDeleteRefusedWhenUnmountFails makes the unmount fail with EBUSY. A
// real busy mount does not: fs.Mount.Close detaches it lazily. The fault is
// for an unmount that fails outright.
func TestDeleteRefusedWhenUnmountFails(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	br, err := env.c.Bind(ctx, "acme", "t-1")
	if err != nil {
		t.Fatal(err)
	}
	env.m.setFailClose(func(string) error { return fmt.Errorf("unmount: %w", syscall.EBUSY) })

	err = env.c.DeleteThread(ctx, "acme", "t-1")
	if !errors.Is(err, api.ErrBusy) {
		t.Fatalf("delete with a busy mount: got %v, want ErrBusy", err)
	}
	if !exists(t, br.Binding.Root) || !isMounted(t, br.MountPath) {
		t.Errorf("refused delete removed the root (%v) or the mount (%v)", !exists(t, br.Binding.Root), !isMounted(t, br.MountPath))
	}
	ti, err := env.c.Thread(ctx, "acme", "t-1")
	if err != nil || !ti.Mounted {
		t.Errorf("after a refused delete: got %+v, %v; want the thread bound and mounted", ti, err)
	}

	env.m.setFailClose(nil)
	if err := env.c.DeleteThread(ctx, "acme", "t-1"); err != nil {
		t.Errorf("delete once the mount is free: %v", err)
	}
}

func TestPinnedToAnotherHost(t *testing.T) {
	store := newStore(t)
	ctx := context.Background()
	if _, err := store.CreateBinding(ctx, meta.Binding{
		ThreadKey: meta.ThreadKey{Tenant: "acme", Thread: "t-1"},
		Kind:      meta.KindHost, HostID: "web-1", Root: "/srv/elsewhere",
		MountPath: "/srv/elsewhere-mnt", BoundAt: time.Now(), State: meta.StateBound,
	}); err != nil {
		t.Fatal(err)
	}
	// web-1 is alive and holds the thread's pin.
	lease, err := store.Heartbeat(ctx, "web-1", 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pin(ctx, meta.ThreadKey{Tenant: "acme", Thread: "t-1"}, "web-1", lease); err != nil {
		t.Fatal(err)
	}
	env := startEnv(t, Config{HostID: "web-2", Store: store})
	want := "The workspace of this thread is /srv/elsewhere on the host web-1. Only that host can continue the thread."
	for _, call := range []struct {
		name string
		fn   func() error
	}{
		{"bind", func() error { _, err := env.c.Bind(ctx, "acme", "t-1"); return err }},
		{"close", func() error { _, err := env.c.CloseThread(ctx, "acme", "t-1"); return err }},
		{"delete", func() error { return env.c.DeleteThread(ctx, "acme", "t-1") }},
	} {
		t.Run(call.name, func(t *testing.T) {
			err := call.fn()
			var apiErr *api.APIError
			if !errors.Is(err, api.ErrPinned) || !errors.As(err, &apiErr) || apiErr.Status != 409 {
				t.Fatalf("got %v, want a 409 matching ErrPinned", err)
			}
			if !strings.Contains(apiErr.Message, want) {
				t.Errorf("got message %q, want it to contain %q", apiErr.Message, want)
			}
		})
	}
	if live := env.live(t, "/srv/elsewhere-mnt"); len(live) != 0 {
		t.Errorf("got %d mounts of a pinned thread, want 0: %v", len(live), live)
	}
	if !env.g.allowed(0) {
		t.Errorf("root not allowed")
	}
}

func TestRestart(t *testing.T) {
	store := newStore(t)
	dataDir := t.TempDir() + "/data"
	ctx := context.Background()

	env1 := startEnv(t, Config{DataDir: dataDir, Store: store})
	var mounts []string
	for _, th := range []string{"t-1", "t-2", "t-3"} {
		br, err := env1.c.Bind(ctx, "acme", th)
		if err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, br.MountPath)
	}
	if _, err := env1.c.CloseThread(ctx, "acme", "t-3"); err != nil {
		t.Fatal(err)
	}
	if err := env1.g.Close(); err != nil {
		t.Fatalf("close gateway: %v", err)
	}
	if live := env1.live(t); len(live) != 0 {
		t.Errorf("got %d mounts after shutdown, want 0: %v", len(live), live)
	}

	// t-2 cannot be mounted at the next start: logged and marked, and the
	// others are served anyway.
	m2 := &tapMounter{failMount: func(p string) error {
		if p == mounts[1] {
			return errors.New("transport endpoint is not connected")
		}
		return nil
	}}
	env2 := startEnv(t, Config{DataDir: dataDir, Store: store, mounter: m2})
	if !isMounted(t, mounts[0]) || isMounted(t, mounts[1]) || isMounted(t, mounts[2]) {
		t.Errorf("after restart: got mounted %v %v %v, want true false false",
			isMounted(t, mounts[0]), isMounted(t, mounts[1]), isMounted(t, mounts[2]))
	}
	if d := m2.detachedPaths(); len(d) != 2 {
		t.Errorf("got DetachStale on %v, want on the two bound threads", d)
	}
	ti, err := env2.c.Thread(ctx, "acme", "t-2")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Mounted || ti.Error == "" || ti.State != meta.StateBound {
		t.Errorf("t-2 after a failed restore: got mounted=%v error=%q state=%q, want unmounted with an error, still bound", ti.Mounted, ti.Error, ti.State)
	}
	// The next call mounts it.
	m2.setFailMount(nil)
	br, err := env2.c.Bind(ctx, "acme", "t-2")
	if err != nil || !br.Binding.Mounted || br.Binding.Error != "" {
		t.Errorf("bind after a failed restore: got %+v, %v; want mounted", br.Binding, err)
	}
	mustMounted(t, mounts[1], true)
	tis, err := env2.c.Threads(ctx)
	if err != nil || len(tis) != 3 {
		t.Errorf("got %d bindings (%v) after restart, want 3", len(tis), err)
	}
}

func TestRestartMany(t *testing.T) {
	store := newStore(t)
	dataDir := t.TempDir() + "/data"
	ctx := context.Background()
	env1 := startEnv(t, Config{DataDir: dataDir, Store: store})
	const n = 100
	for i := range n {
		if _, err := env1.c.Bind(ctx, fmt.Sprintf("tenant-%d", i%7), fmt.Sprintf("t-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := env1.g.Close(); err != nil {
		t.Fatal(err)
	}
	env2 := startEnv(t, Config{DataDir: dataDir, Store: store})
	if live, made := env2.live(t), env2.m.made(); len(live) != n || made != n {
		t.Errorf("after restart: got %d live mounts from %d mounts, want %d", len(live), made, n)
	}
	tis, err := env2.c.Threads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tis {
		if !ti.Mounted {
			t.Errorf("%s/%s not mounted after restart: %s", ti.Tenant, ti.Thread, ti.Error)
		}
	}
}
