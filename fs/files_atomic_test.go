package fs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"warren/internal/testenv"
)

// TestFilesWriteKeepsFileOnFullDisk: on a full disk the file API refuses
// a write and an edit and the file keeps its whole old content, a file
// with several hard links too; once there is space, a write keeps the
// file's mode, owner and links, and leaves no temporary file behind.
func TestFilesWriteKeepsFileOnFullDisk(t *testing.T) {
	mnt := testenv.LoopFS(t, 32<<20, "mkfs.ext4", []string{"-q"}, "")
	dir := filepath.Join(mnt, "ws")
	must(t, os.Mkdir(dir, 0o755))
	hub := NewHub(HubConfig{})
	t.Cleanup(hub.Close)
	f, err := hub.Files(dir, "test/full", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, a := context.Background(), RunActor("r")

	old := bytes.Repeat([]byte("old line\n"), 10000)
	must(t, os.WriteFile(filepath.Join(dir, "one.txt"), old, 0o640))
	must(t, os.Chown(filepath.Join(dir, "one.txt"), 1234, 5678))
	must(t, os.WriteFile(filepath.Join(dir, "linked.txt"), old, 0o600))
	must(t, os.Link(filepath.Join(dir, "linked.txt"), filepath.Join(dir, "other-name.txt")))
	filler := testenv.FillDisk(t, mnt)

	big := bytes.Repeat([]byte("new line!\n"), 100000)
	for _, name := range []string{"one.txt", "linked.txt"} {
		if _, err := f.Write(ctx, a, name, big); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("write %s on a full disk: %v, want ENOSPC", name, err)
		}
		if _, _, err := f.Edit(ctx, a, name, "old line", strings.Repeat("x", 40), true); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("edit %s on a full disk: %v, want ENOSPC", name, err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, old) {
			t.Errorf("%s after refused writes: %d bytes (%v), want its old %d", name, len(got), err, len(old))
		}
	}

	must(t, os.Remove(filler))
	for _, name := range []string{"one.txt", "linked.txt"} {
		if _, err := f.Write(ctx, a, name, big); err != nil {
			t.Fatalf("write %s with space: %v", name, err)
		}
	}
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "one.txt"), &st))
	if st.Mode&0o7777 != 0o640 || st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("one.txt after a write: mode %o owner %d:%d, want 640 1234:5678", st.Mode&0o7777, st.Uid, st.Gid)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "other-name.txt")); err != nil || !bytes.Equal(got, big) {
		t.Errorf("the other name of linked.txt: %d bytes (%v), want the new %d", len(got), err, len(big))
	}
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestFilesWriteSweepsCrashLeftovers: the temporary file of a write that
// a crash cut between its link and its rename (a hidden .warren-write-
// file) is removed by the next write in its folder after a start; other
// files stay.
func TestFilesWriteSweepsCrashLeftovers(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	must(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	left := filepath.Join(dir, "src", tempPrefix+"0123456789abcdef")
	must(t, os.WriteFile(left, []byte("never acknowledged"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "src", ".warren-other"), []byte("mine"), 0o600))
	if _, err := f.Write(ctx, RunActor("r"), "src/app.ts", []byte("let a = 1\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover of a crashed write is still there: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "src", ".warren-other")); err != nil || string(got) != "mine" {
		t.Errorf("another hidden file: %q, %v", got, err)
	}
}
