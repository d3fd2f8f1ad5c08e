package fs

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenameWhiteoutRefused: renameat2 with RENAME_WHITEOUT through a
// mount, by root on the host, is refused as mknod of a device is: the
// file stays, no 0:0 character device appears in the backing folder, and
// the refusal is reported. A plain renameat2 still moves.
func TestRenameWhiteoutRefused(t *testing.T) {
	var mu sync.Mutex
	var refusals []Refusal
	backing, mnt := mountTemp(t, Options{Name: "t/whiteout", OnRefusal: func(r Refusal) {
		mu.Lock()
		refusals = append(refusals, r)
		mu.Unlock()
	}})
	must(t, os.WriteFile(filepath.Join(mnt, "a"), []byte("a"), 0o644))
	err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(mnt, "a"), unix.AT_FDCWD, filepath.Join(mnt, "b"), unix.RENAME_WHITEOUT)
	if !errors.Is(err, unix.EPERM) {
		t.Errorf("renameat2(RENAME_WHITEOUT) through the mount: %v, want EPERM", err)
	}
	for _, dir := range []string{mnt, backing} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "a"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Errorf("%s/a after the refused whiteout: mode %o, %v; want the regular file", dir, st.Mode, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "b")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/b after the refused whiteout: %v; want no such file", dir, err)
		}
	}
	mu.Lock()
	if len(refusals) != 1 || refusals[0].Op != "rename" {
		t.Errorf("refusals reported: %+v; want one rename", refusals)
	}
	mu.Unlock()
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(mnt, "a"), unix.AT_FDCWD, filepath.Join(mnt, "b"), 0); err != nil {
		t.Fatalf("a plain renameat2: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(backing, "b")); err != nil || string(got) != "a" {
		t.Errorf("the renamed file in the backing folder: %q, %v", got, err)
	}
}
