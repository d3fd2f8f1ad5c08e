package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/testenv"
	"warren/meta"
)

func TestInspectionMountChecks(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	base := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nonEmpty := mk("full")
	if err := os.WriteFile(filepath.Join(nonEmpty, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inData := filepath.Join(env.cfg.DataDir, "inside")
	if err := os.Mkdir(inData, 0o755); err != nil {
		t.Fatal(err)
	}
	linkToData := filepath.Join(base, "link")
	if err := os.Symlink(inData, linkToData); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		path  string
		owner uint32
		want  error
	}{
		{"relative", "rel/dir", 0, api.ErrInvalid},
		{"missing", filepath.Join(base, "missing"), 0, api.ErrInvalid},
		{"a file", file, 0, api.ErrInvalid},
		{"not empty", nonEmpty, 0, api.ErrInvalid},
		{"the data dir", env.cfg.DataDir, 0, api.ErrInvalid},
		{"inside the data dir", inData, 0, api.ErrInvalid},
		{"a link into the data dir", linkToData, 0, api.ErrInvalid},
		{"a workspace mount point", filepath.Join(env.g.mntBase), 0, api.ErrInvalid},
		{"owned by someone else", mk("theirs"), 4242, api.ErrForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := env.g.inspections.Mount(ctx, api.MountRequest{Thread: "t", Path: tt.path}, tt.owner)
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := env.c.Thread(ctx, "", "t"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a refused inspection mount bound the thread: %v", err)
	}

	t.Run("a mount point", func(t *testing.T) {
		testenv.RequireRoot(t) // needed to mount a tmpfs
		dir := mk("tmpfs")
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
			testenv.CannotRun(t, "mount tmpfs: %v", err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		_, err := env.g.inspections.Mount(ctx, api.MountRequest{Thread: "t", Path: dir}, 0)
		if !errors.Is(err, api.ErrConflict) {
			t.Errorf("got %v, want ErrConflict", err)
		}
	})
}

func TestInspectionMountLifecycle(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	ro, rw := t.TempDir(), t.TempDir()

	mi, err := env.c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "t-1", Path: ro})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	if !mi.Mounted || mi.Writable || mi.Path != ro || mi.Thread != "t-1" {
		t.Errorf("got %+v, want a mounted read-only mount of t-1 at %s", mi, ro)
	}
	// The inspection mount bound the thread lazily.
	ti, err := env.c.Thread(ctx, "acme", "t-1")
	if err != nil || !ti.Mounted {
		t.Fatalf("thread after an inspection mount: %+v, %v; want bound and mounted", ti, err)
	}
	// Read-only in the mount table and to a write.
	checkReadOnly(t, ro, true)

	if _, err := env.c.Mount(ctx, api.MountRequest{Tenant: "acme", Thread: "t-1", Path: rw, Writable: true}); err != nil {
		t.Fatalf("writable mount: %v", err)
	}
	checkReadOnly(t, rw, false)

	// A file written through the writable mount shows through the other.
	if err := os.WriteFile(filepath.Join(rw, "seen.txt"), []byte("x"), 0o644); err != nil {
		t.Fatalf("write through the writable mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(ro, "seen.txt")); err != nil || string(got) != "x" {
		t.Errorf("read through the read-only mount: got %q, %v; want %q", got, err, "x")
	}

	// The same path again, for any thread, is a conflict, also when the
	// mount there shows files.
	if _, err := env.c.Mount(ctx, api.MountRequest{Thread: "other", Path: ro}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("second mount at %s: got %v, want ErrConflict", ro, err)
	}
	ms, err := env.c.Mounts(ctx)
	if err != nil || len(ms) != 2 {
		t.Fatalf("got %d mounts (%v), want 2", len(ms), err)
	}

	if err := env.c.Unmount(ctx, ro); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	if isMounted(t, ro) {
		t.Errorf("%s still mounted", ro)
	}
	if err := env.c.Unmount(ctx, ro); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("second unmount: got %v, want ErrNotFound", err)
	}

	// Deleting the thread takes its inspection mounts down first.
	if err := env.c.DeleteThread(ctx, "acme", "t-1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if isMounted(t, rw) {
		t.Errorf("inspection mount %s survived the delete of its thread", rw)
	}
	ms, err = env.c.Mounts(ctx)
	if err != nil || len(ms) != 0 {
		t.Errorf("got mounts %+v (%v) after delete, want none", ms, err)
	}
}

func TestInspectionMountRestored(t *testing.T) {
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	dir := t.TempDir()

	// The first run leaves its mounts behind, as a crash does.
	leaky := &leakyMounter{}
	env1 := startEnv(t, Config{DataDir: dataDir, Store: store, mounter: leaky})
	t.Cleanup(leaky.closeAll)
	if _, err := env1.c.Mount(ctx, api.MountRequest{Thread: "t", Path: dir, Writable: true}); err != nil {
		t.Fatal(err)
	}
	if err := env1.g.Close(); err != nil {
		t.Fatal(err)
	}
	mustMounted(t, dir, true)
	// A record of a thread that no longer exists is dropped at start.
	if _, err := store.PutInspectionMount(ctx, meta.InspectionMount{
		ThreadKey: meta.ThreadKey{Tenant: "x", Thread: "gone"}, Path: t.TempDir(),
	}); err != nil {
		t.Fatal(err)
	}

	env2 := startEnv(t, Config{DataDir: dataDir, Store: store})
	if !isMounted(t, dir) {
		t.Errorf("inspection mount %s not restored", dir)
	} else {
		checkReadOnly(t, dir, false)
	}
	// The stale mount was detached first: one mount there, not two.
	if got := testenv.MountsUnder(t, dir); len(got) != 1 {
		t.Errorf("mounts at %s: got %v, want one", dir, got)
	}
	ms, err := env2.c.Mounts(ctx)
	if err != nil || len(ms) != 1 || !ms[0].Mounted {
		t.Errorf("got mounts %+v (%v), want one, mounted", ms, err)
	}
}
