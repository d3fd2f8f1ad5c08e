package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// twoStates makes two folders whose difference has every kind of delta:
// kind changes both ways, read-only folders to fill, mode changes.
func twoStates(t *testing.T) (a, b string) {
	a, b = t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "keep"), "same", 0o644)
	write(t, filepath.Join(b, "keep"), "same", 0o644)
	write(t, filepath.Join(a, "edit.go"), "package a\n", 0o644)
	write(t, filepath.Join(b, "edit.go"), "package b\n", 0o644)
	write(t, filepath.Join(a, "chmod.sh"), "#!/bin/sh\n", 0o644)
	write(t, filepath.Join(b, "chmod.sh"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(a, "old/deep/file"), "gone", 0o644)
	write(t, filepath.Join(a, "fileToDir"), "a file", 0o644)
	write(t, filepath.Join(b, "fileToDir/now"), "inside", 0o644)
	write(t, filepath.Join(a, "dirToFile/was"), "inside", 0o644)
	write(t, filepath.Join(b, "dirToFile"), "a file", 0o600)
	write(t, filepath.Join(a, "dirToLink/x"), "x", 0o644)
	os.Symlink("keep", filepath.Join(b, "dirToLink"))
	os.Symlink("old-target", filepath.Join(a, "relink"))
	os.Symlink("new-target", filepath.Join(b, "relink"))
	write(t, filepath.Join(b, "ro/a/b/file"), "in read-only folders", 0o444)
	for _, d := range []string{"ro/a/b", "ro/a", "ro"} {
		os.Chmod(filepath.Join(b, d), 0o555)
	}
	os.Mkdir(filepath.Join(a, "tighten"), 0o755)
	write(t, filepath.Join(a, "tighten/f"), "f", 0o644)
	write(t, filepath.Join(b, "tighten/f"), "f2", 0o644)
	write(t, filepath.Join(b, "tighten/g"), "g", 0o644)
	os.Chmod(filepath.Join(b, "tighten"), 0o500)
	os.MkdirAll(filepath.Join(b, "empty/folder"), 0o2750)
	os.Chmod(filepath.Join(b, "empty/folder"), 0o2750|os.ModeSetgid)
	return a, b
}

func TestApply(t *testing.T) {
	r := openRepo(t)
	a, b := twoStates(t)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	deltas, err := r.Diff(context.Background(), ha, hb)
	if err != nil {
		t.Fatal(err)
	}
	var wantChanged []string
	for _, d := range deltas {
		wantChanged = append(wantChanged, d.Path)
	}
	wantChanged = slices.Compact(wantChanged)

	dst := t.TempDir()
	restore(t, r, ha, dst)
	sameDirs(t, dst, a)
	changed, err := r.Apply(context.Background(), deltas, newDirTarget(t, dst))
	if err != nil {
		t.Fatal(err)
	}
	sameDirs(t, dst, b)
	if !slices.Equal(changed, wantChanged) {
		t.Errorf("changed:\ngot  %q\nwant %q", changed, wantChanged)
	}
}

// TestApplyIdempotent cuts a plan short after n calls, then runs it whole:
// the workspace must end as the target tree, whatever n.
func TestApplyIdempotent(t *testing.T) {
	r := openRepo(t)
	a, b := twoStates(t)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	deltas, err := r.Diff(context.Background(), ha, hb)
	if err != nil {
		t.Fatal(err)
	}
	// Count the calls of a whole run.
	probe := t.TempDir()
	restore(t, r, ha, probe)
	counter := newDirTarget(t, probe)
	if _, err := r.Apply(context.Background(), deltas, counter); err != nil {
		t.Fatal(err)
	}
	calls := counter.calls.Load()
	if calls < 10 {
		t.Fatalf("a whole run made %d calls; want more to cut", calls)
	}
	for _, n := range []int64{1, 2, calls / 3, calls / 2, calls - 1} {
		dst := t.TempDir()
		restore(t, r, ha, dst)
		cut := newDirTarget(t, dst)
		cut.failAfter = n
		if _, err := r.Apply(context.Background(), deltas, cut); !errors.Is(err, errCut) {
			t.Fatalf("cut after %d: got %v, want %v", n, err, errCut)
		}
		for run := range 2 {
			if _, err := r.Apply(context.Background(), deltas, newDirTarget(t, dst)); err != nil {
				t.Fatalf("cut after %d, run %d: %v", n, run, err)
			}
			sameDirs(t, dst, b)
		}
	}
}

// TestApplyCorruptBlob checks that a blob that fails its hash replaces
// nothing.
func TestApplyCorruptBlob(t *testing.T) {
	r := openRepo(t)
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "f"), "the old content", 0o644)
	write(t, filepath.Join(b, "f"), "the new content", 0o644)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	spreadAll(t, r)
	flipByte(t, r.objectPath(sum([]byte("the new content"))), -1)
	deltas, _ := r.Diff(context.Background(), ha, hb)
	dst := t.TempDir()
	restore(t, r, ha, dst)
	if _, err := r.Apply(context.Background(), deltas, newDirTarget(t, dst)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Apply of a corrupt blob: got %v, want ErrCorrupt", err)
	}
	sameDirs(t, dst, a)
}

// TestRecorderBack cuts a plan short after n calls, recorded, then
// applies what Back returns: the workspace must be the tree the plan
// started from, whatever n (the plan's every kind of delta: kind changes
// both ways, read-only folders, modes); a plan run whole is taken back
// whole.
func TestRecorderBack(t *testing.T) {
	r := openRepo(t)
	a, b := twoStates(t)
	ha, _ := build(t, r, a, Hash{}, nil, true)
	hb, _ := build(t, r, b, Hash{}, nil, true)
	deltas, err := r.Diff(context.Background(), ha, hb)
	if err != nil {
		t.Fatal(err)
	}
	probe := t.TempDir()
	restore(t, r, ha, probe)
	counter := newDirTarget(t, probe)
	if _, err := r.Apply(context.Background(), deltas, counter); err != nil {
		t.Fatal(err)
	}
	calls := counter.calls.Load()
	for _, n := range []int64{1, 2, calls / 3, calls / 2, calls - 1, calls} {
		dst := t.TempDir()
		restore(t, r, ha, dst)
		cut := newDirTarget(t, dst)
		cut.failAfter = n
		rec := Record(cut)
		_, err := r.Apply(context.Background(), deltas, rec)
		if n < calls && !errors.Is(err, errCut) {
			t.Fatalf("cut after %d: got %v, want %v", n, err, errCut)
		}
		if n < calls && rec.Failed == "" {
			t.Errorf("cut after %d: the recorder names no failed call", n)
		}
		if _, err := r.Apply(context.Background(), rec.Back(deltas), newDirTarget(t, dst)); err != nil {
			t.Fatalf("cut after %d: apply Back: %v", n, err)
		}
		sameDirs(t, dst, a)
	}
}
