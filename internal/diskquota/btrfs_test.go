package diskquota_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// TestThreadGroup: a thread's workspace and home, two subvolumes, share
// one limit through the thread's group while both stay in Group (two
// parents each, which the kernel takes); an empty home joins with the
// numbers consistent (a rescan finds what the group counted); a
// workspace limited the way it was before homes (its own group's limit)
// loses that limit to the thread's group; and ForgetThread removes the
// group.
func TestThreadGroup(t *testing.T) {
	testenv.RequireCommand(t, "btrfs")
	mnt := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	q, err := diskquota.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	ws, home := filepath.Join(mnt, "ws"), filepath.Join(mnt, "home")
	for _, p := range []string{ws, home} {
		if err := diskquota.MakeSubvolume(p); err != nil {
			t.Fatal(err)
		}
	}
	// A thread from before homes: 1 MiB in a workspace limited to 2 MiB
	// in its own group.
	if err := q.Limit(ws, 2<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WriteUntil(filepath.Join(ws, "old"), 1<<20); err != nil {
		t.Fatal(err)
	}
	unix.Sync()

	const limit = 8 << 20
	if err := q.LimitThread(ws, home, limit); err != nil {
		t.Fatalf("LimitThread: %v", err)
	}
	if err := q.LimitThread(ws, home, limit); err != nil {
		t.Fatalf("LimitThread again: %v", err)
	}
	unix.Sync()
	got, used, err := q.ThreadLimit(ws)
	if err != nil || got != limit {
		t.Fatalf("ThreadLimit = %d, %v; want %d", got, err, limit)
	}
	if used < 1<<20 || used > 1<<20+256<<10 {
		t.Errorf("the thread's group counts %d bytes after the empty home joined; want the workspace's 1 MiB", used)
	}
	wsID, homeID := rootID(t, ws), rootID(t, home)
	group := fmt.Sprintf("2/%d", wsID)
	parents := qgroupParents(t, mnt)
	for _, id := range []uint64{wsID, homeID} {
		if p := parents[fmt.Sprintf("0/%d", id)]; !slices.Contains(p, "1/30561") || !slices.Contains(p, group) {
			t.Errorf("the parents of 0/%d are %q; want 1/30561 and %s", id, p, group)
		}
	}
	// The numbers are consistent: a full rescan counts what the group did.
	if out, err := exec.Command("btrfs", "quota", "rescan", "-w", mnt).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota rescan: %v\n%s", err, out)
	}
	if _, again, err := q.ThreadLimit(ws); err != nil || again != used {
		t.Errorf("after a rescan the thread's group counts %d bytes (%v); before it, %d", again, err, used)
	}

	// The workspace's old limit of 2 MiB is gone: it grows to 5 MiB.
	if n, err := testenv.WriteUntil(filepath.Join(ws, "more"), 4<<20); err != nil {
		t.Fatalf("the workspace wrote %d of 4 MiB more: %v; its old limit still holds", n, err)
	}
	// The home writes the rest of the 8 MiB, and no more.
	n, err := testenv.WriteUntil(filepath.Join(home, "cache"), 16<<20)
	if !errors.Is(err, unix.EDQUOT) || n > 4<<20 {
		t.Fatalf("the home wrote %d bytes beside 5 MiB in the workspace under a thread's limit of 8 MiB: %v; want EDQUOT by 3 MiB", n, err)
	}

	// Lifted: the home writes on.
	if err := q.LimitThread(ws, home, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := testenv.WriteUntil(filepath.Join(home, "cache2"), 16<<20); err != nil {
		t.Fatalf("the home wrote %d bytes once the limit was lifted: %v", n, err)
	}

	if err := q.ForgetThread(ws, home); err != nil {
		t.Fatalf("ForgetThread: %v", err)
	}
	if err := q.ForgetThread(ws, home); err != nil {
		t.Fatalf("ForgetThread again: %v", err)
	}
	if _, ok := qgroupParents(t, mnt)[group]; ok {
		t.Errorf("quota group %s is still there after ForgetThread", group)
	}
	if err := q.ForgetThread(filepath.Join(mnt, "missing"), ""); err != nil {
		t.Errorf("ForgetThread of a missing workspace: %v", err)
	}
}

// rootID is the id of the subvolume at path.
func rootID(t testing.TB, path string) uint64 {
	t.Helper()
	out, err := exec.Command("btrfs", "inspect-internal", "rootid", path).Output()
	if err != nil {
		t.Fatalf("btrfs inspect-internal rootid %s: %v", path, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// qgroupParents maps each quota group of the filesystem at mnt to its
// parents, as btrfs-progs shows them.
func qgroupParents(t testing.TB, mnt string) map[string][]string {
	t.Helper()
	out, err := exec.Command("btrfs", "qgroup", "show", "-p", "--raw", mnt).Output()
	if err != nil {
		t.Fatalf("btrfs qgroup show: %v", err)
	}
	groups := make(map[string][]string)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.Contains(f[0], "/") || strings.HasPrefix(f[0], "-") {
			continue
		}
		var parents []string
		if f[3] != "-" {
			parents = strings.Split(f[3], ",")
		}
		groups[f[0]] = parents
	}
	return groups
}
