package gateway

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"warren/api"
	"warren/fs"
	"warren/gateway/threads"
)

// These tests follow a thread's life through the mounts themselves: files
// written and read through them, and the mount table.

func TestFUSEThreadLifecycle(t *testing.T) {
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	env := startEnv(t, Config{DataDir: dataDir, Store: store})

	br, err := env.c.Bind(ctx, "acme", "../other-tenant/t-1")
	if err != nil {
		t.Fatalf("bind: %v", err)
	}
	mnt, root := br.MountPath, br.Binding.Root
	mustMounted(t, mnt, true)
	if err := os.WriteFile(filepath.Join(mnt, "hello.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "hello.txt")); err != nil || string(got) != "hi" {
		t.Errorf("backing file: got %q, %v; want %q", got, err, "hi")
	}

	// A read-only inspection mount shows the files and refuses writes; a
	// writable one takes them.
	roDir, rwDir := t.TempDir(), t.TempDir()
	if _, err := env.c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "../other-tenant/t-1", Path: roDir}); err != nil {
		t.Fatalf("inspection mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(roDir, "hello.txt")); err != nil || string(got) != "hi" {
		t.Errorf("read through the inspection mount: got %q, %v", got, err)
	}
	err = os.WriteFile(filepath.Join(roDir, "new.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to a read-only inspection mount: got %v, want EROFS", err)
	}
	if _, err := env.c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "../other-tenant/t-1", Path: rwDir, Writable: true}); err != nil {
		t.Fatalf("writable inspection mount: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rwDir, "via-rw.txt"), []byte("rw"), 0o644); err != nil {
		t.Errorf("write to a writable inspection mount: %v", err)
	}
	if err := env.c.Unmount(ctx, roDir); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	mustMounted(t, roDir, false)

	// Restart: every binding and the remaining inspection mount come back.
	if err := env.g.Close(); err != nil {
		t.Fatalf("close gateway: %v", err)
	}
	mustMounted(t, mnt, false)
	mustMounted(t, rwDir, false)
	env = startEnv(t, Config{DataDir: dataDir, Store: store})
	mustMounted(t, mnt, true)
	mustMounted(t, rwDir, true)
	if got, err := os.ReadFile(filepath.Join(mnt, "via-rw.txt")); err != nil || string(got) != "rw" {
		t.Errorf("after restart: got %q, %v; want %q", got, err, "rw")
	}

	// Close keeps the folder, a bind brings the mount back.
	if _, err := env.c.CloseThread(ctx, "acme", "../other-tenant/t-1"); err != nil {
		t.Fatalf("close: %v", err)
	}
	mustMounted(t, mnt, false)
	if _, err := os.Stat(filepath.Join(root, "hello.txt")); err != nil {
		t.Errorf("close lost the workspace: %v", err)
	}
	if _, err := env.c.Bind(ctx, "acme", "../other-tenant/t-1"); err != nil {
		t.Fatalf("bind after close: %v", err)
	}
	mustMounted(t, mnt, true)

	// Delete takes down both mounts, then the folder.
	if err := env.c.DeleteThread(ctx, "acme", "../other-tenant/t-1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	mustMounted(t, mnt, false)
	mustMounted(t, rwDir, false)
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace after delete: got %v, want it gone", err)
	}
}

// TestFUSEStaleMountAtStart leaves a mount without its server, as a killed
// daemon does, and checks that the next start detaches it and serves the
// thread again.
func TestFUSEStaleMountAtStart(t *testing.T) {
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()

	// A mounter whose mounts are never closed by the gateway: Close of the
	// gateway then leaves them behind, still mounted.
	leaky := &leakyMounter{}
	env := startEnv(t, Config{DataDir: dataDir, Store: store, mounter: leaky})
	// Registered after startEnv, so it runs before the check that no mount
	// is left: the leaked mounts go even if the test stops early.
	t.Cleanup(leaky.closeAll)
	br, err := env.c.Bind(ctx, "acme", "t-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(br.MountPath, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.g.Close(); err != nil {
		t.Fatal(err)
	}
	mustMounted(t, br.MountPath, true)

	env = startEnv(t, Config{DataDir: dataDir, Store: store})
	ti, err := env.c.Thread(ctx, "acme", "t-1")
	if err != nil || !ti.Mounted || ti.Error != "" {
		t.Fatalf("after start over a stale mount: got %+v, %v; want mounted", ti, err)
	}
	if got, err := os.ReadFile(filepath.Join(br.MountPath, "f")); err != nil || string(got) != "kept" {
		t.Errorf("read after start: got %q, %v", got, err)
	}
}

// leakyMounter mounts with FUSE but hands the gateway closers that do
// nothing, keeping the real ones for the test's cleanup.
type leakyMounter struct {
	threads.FUSEMounter
	mu   sync.Mutex
	real []io.Closer
}

func (l *leakyMounter) Mount(ctx context.Context, backing, mountpoint string, opts fs.Options) (io.Closer, error) {
	m, err := l.FUSEMounter.Mount(ctx, backing, mountpoint, opts)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.real = append(l.real, m)
	l.mu.Unlock()
	return nopCloser{}, nil
}

// closeAll unmounts what it leaked. A leaked mount that the next start
// detached is not mounted any more, which Close does not mind.
func (l *leakyMounter) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.real {
		m.Close()
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
