package threads

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"warren/internal/progress"
)

// TestRemoveWorkspace: the workspace goes with everything in it, each
// entry of its top folder reported as it goes; a link in it to a folder
// outside is removed, not followed; a missing root is no error.
func TestRemoveWorkspace(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	for _, p := range []string{filepath.Join(root, "a", "b"), filepath.Join(root, "c"), outside} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(root, "a", "b", "f"), filepath.Join(root, "top.txt"), filepath.Join(outside, "keep")} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	var frames []progress.Frame
	ctx := progress.With(context.Background(), func(f progress.Frame) { frames = append(frames, f) })
	if err := removeWorkspace(ctx, root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Errorf("the workspace is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file outside, behind a link, went: %v", err)
	}
	if len(frames) != 4 || frames[3] != (progress.Frame{Done: 4, Total: 4, Phase: PhaseRemove}) {
		t.Errorf("frames %+v, want 4, the last 4 of 4 %q", frames, PhaseRemove)
	}
	if err := removeWorkspace(ctx, root); err != nil {
		t.Errorf("a missing workspace: %v", err)
	}
}

// TestRemoveHomeFollowsNoLink: a home goes with what is in it, a link in
// it removed, not followed; a link in the home's place goes itself, what
// it names stays; a link in place of a folder above it is refused.
func TestRemoveHomeFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, HomesDir, "acme", "t")
	if err := os.MkdirAll(filepath.Join(home, ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, ".cache", "link")); err != nil {
		t.Fatal(err)
	}
	if err := removeHome(home); err != nil {
		t.Fatal(err)
	}
	if exists(home) {
		t.Error("the home is still there")
	}
	if err := os.Symlink(outside, home); err != nil {
		t.Fatal(err)
	}
	if err := removeHome(home); err != nil || exists(home) {
		t.Errorf("a link in the home's place: %v, there %v; want it gone", err, exists(home))
	}
	tenant := filepath.Join(dir, HomesDir, "linked")
	if err := os.Symlink(outside, tenant); err != nil {
		t.Fatal(err)
	}
	if err := removeHome(filepath.Join(tenant, "keep")); err == nil {
		t.Error("a home below a linked tenant folder was removed")
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("a file behind a link went: %v", err)
	}
	if err := removeHome(filepath.Join(dir, "none", "acme", "t")); err != nil {
		t.Errorf("a missing home: %v", err)
	}
}
