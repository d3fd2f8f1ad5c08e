package diskquota_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/diskquota"
	"warren/internal/testenv"
)

// TestLimitAndReserve: a subvolume's limit stops root's writes with EDQUOT
// (root has CAP_SYS_RESOURCE), and the reserve stops all subvolumes
// together while the disk still has room.
func TestLimitAndReserve(t *testing.T) {
	mnt := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	if diskquota.Enabled(mnt) {
		t.Fatal("quotas are on in a new btrfs")
	}
	q, err := diskquota.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if !diskquota.Enabled(mnt) {
		t.Fatal("quotas are off after Open")
	}
	a, b := filepath.Join(mnt, "a"), filepath.Join(mnt, "b")
	for _, p := range []string{a, b} {
		if err := diskquota.MakeSubvolume(p); err != nil {
			t.Fatal(err)
		}
		if ok, err := diskquota.IsSubvolume(p); !ok || err != nil {
			t.Fatalf("IsSubvolume(%s) = %v, %v", p, ok, err)
		}
	}
	if err := q.Limit(a, 8<<20); err != nil {
		t.Fatal(err)
	}
	if err := q.Limit(b, 0); err != nil {
		t.Fatal(err)
	}
	g, err := os.Create(filepath.Join(a, "g"))
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Fallocate(int(g.Fd()), 0, 0, 16<<20)
	g.Close()
	if !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("fallocate 16 MiB in a: %v; want EDQUOT", err)
	}
	n, err := testenv.WriteUntil(filepath.Join(a, "f"), 32<<20)
	if !errors.Is(err, unix.EDQUOT) || n > 8<<20 {
		t.Fatalf("root wrote %d bytes into a with an 8 MiB limit: %v; want EDQUOT by 8 MiB", n, err)
	}
	// At its limit, a subvolume can still be freed, and then written.
	if err := os.Remove(filepath.Join(a, "f")); err != nil {
		t.Fatalf("remove a file at the limit: %v", err)
	}
	if n, err := testenv.WriteUntil(filepath.Join(a, "h"), 4<<20); err != nil {
		t.Fatalf("write 4 MiB after freeing the limit: %d, %v", n, err)
	}

	// A subvolume that has data before it joins the reserve's group
	// (a workspace from before the reserve was set).
	c := filepath.Join(mnt, "c")
	if err := diskquota.MakeSubvolume(c); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WriteUntil(filepath.Join(c, "f"), 8<<20); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	if err := q.Limit(c, 0); err != nil {
		t.Fatalf("Limit of a subvolume with data: %v", err)
	}

	const reserve = 128 << 20
	if _, err := q.Reserve(reserve); err != nil {
		t.Fatal(err)
	}
	n, err = testenv.WriteUntil(filepath.Join(b, "f"), 1<<30)
	if !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("b wrote %d bytes: %v; want EDQUOT at the reserve", n, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < reserve/2 {
		t.Fatalf("after b hit the reserve, %d bytes are free; want about %d", free, reserve)
	}
}

func TestNotBtrfs(t *testing.T) {
	_, err := diskquota.Open(t.TempDir())
	if ok, _ := diskquota.IsBtrfs(t.TempDir()); !ok && !errors.Is(err, diskquota.ErrUnsupported) {
		t.Fatalf("Open on a filesystem that is not btrfs: %v; want ErrUnsupported", err)
	}
}

// TestJoinAndLift: a subvolume that joins Group counts in the reserve
// (its writes stop at it too), GroupLimit reads the limit the reserve set,
// and Reserve(0) lifts it.
func TestJoinAndLift(t *testing.T) {
	mnt := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	q, err := diskquota.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(mnt, "repo")
	if err := diskquota.MakeSubvolume(repo); err != nil {
		t.Fatal(err)
	}
	if !diskquota.SameFilesystem(repo, mnt) {
		t.Fatal("a subvolume is not on its parent's filesystem")
	}
	if diskquota.SameFilesystem(repo, os.TempDir()) {
		t.Fatal("two filesystems are one")
	}
	if err := q.Join(repo); err != nil {
		t.Fatal(err)
	}
	if err := q.Join(repo); err != nil {
		t.Fatalf("joining again: %v", err)
	}
	limit, err := q.Reserve(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := q.GroupLimit(); err != nil || got != limit || limit == 0 {
		t.Fatalf("GroupLimit = %d, %v; the reserve set %d", got, err, limit)
	}
	n, err := testenv.WriteUntil(filepath.Join(repo, "fill"), 256<<20)
	if !errors.Is(err, unix.EDQUOT) || uint64(n) > limit+(4<<20) {
		t.Fatalf("a joined subvolume wrote %d bytes (%v) with the group limited to %d; want EDQUOT at it", n, err, limit)
	}
	if _, err := q.Reserve(0); err != nil {
		t.Fatal(err)
	}
	if got, err := q.GroupLimit(); err != nil || got != 0 {
		t.Fatalf("GroupLimit after Reserve(0) = %d, %v; want none", got, err)
	}
	if n, err := testenv.WriteUntil(filepath.Join(repo, "more"), 128<<20); err != nil {
		t.Fatalf("a write of 128 MiB once the limit is lifted: %d bytes, %v", n, err)
	}
}
