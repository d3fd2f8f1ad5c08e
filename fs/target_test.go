package fs

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// TestServeOntoTarget mounts onto a descriptor while the path it was
// opened by is swapped for a symlink, then moves the mount and closes it:
// the mount lands on the descriptor's folder, never where the path leads
// now, and Close takes down that mount wherever it went.
func TestServeOntoTarget(t *testing.T) {
	testenv.RequireRootFUSE(t)
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	victim := filepath.Join(dir, "victim") // someone else's folder, not empty
	for _, d := range []string{backing, filepath.Join(dir, "p", "d"), filepath.Join(victim, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(victim, "d", "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range testenv.MountsUnder(t, dir) {
			t.Errorf("mount left at %s", p)
			unix.Unmount(p, unix.MNT_DETACH)
		}
	})

	target, err := unix.Open(filepath.Join(dir, "p", "d"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(target)
	// The parent is swapped for a link to the victim after the check.
	must(t, os.Rename(filepath.Join(dir, "p"), filepath.Join(dir, "q")))
	if err := os.Symlink(victim, filepath.Join(dir, "p")); err != nil {
		t.Fatal(err)
	}

	label := filepath.Join(dir, "p", "d")
	m, err := serveTest(context.Background(), backing, label, Options{
		ReadOnly: true,
		Target:   &Target{Fd: target},
		Logger:   hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn}),
	})
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			m.Close()
		}
	})
	if got := m.Mountpoint(); got != label {
		t.Errorf("Mountpoint: got %q, want %q", got, label)
	}
	at := testenv.MountsUnder(t, dir)
	if want := []string{filepath.Join(dir, "q", "d")}; !slices.Equal(at, want) {
		t.Fatalf("mounts under %s: got %v, want %v (the descriptor's folder only)", dir, at, want)
	}
	for _, e := range testenv.Mounts(t) {
		if e.Path != at[0] {
			continue
		}
		if e.Type != "fuse.warren" {
			t.Errorf("filesystem type: got %q, want fuse.warren", e.Type)
		}
		for _, o := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(e.Options, o) {
				t.Errorf("mount options %v lack %s", e.Options, o)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(backing, "f"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "q", "d", "f")); err != nil || string(got) != "hi" {
		t.Errorf("read through the mount: got %q, %v; want %q", got, err, "hi")
	}

	// The folder moves with its mount, and a link to the victim takes its
	// old name: Close still finds the mount, and only it.
	must(t, os.Rename(filepath.Join(dir, "q"), filepath.Join(dir, "r")))
	if err := os.Symlink(victim, filepath.Join(dir, "q")); err != nil {
		t.Fatal(err)
	}
	closed = true
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if at := testenv.MountsUnder(t, dir); len(at) != 0 {
		t.Errorf("mounts left after Close: %v", at)
	}
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the mount still serves 30s after Close, with no user")
	}
	if _, err := os.Stat(filepath.Join(victim, "d", "secret")); err != nil {
		t.Errorf("the victim's file: %v", err)
	}
}
