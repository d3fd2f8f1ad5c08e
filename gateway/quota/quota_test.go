package quota_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/quota"
	"warren/internal/diskquota"
	"warren/internal/testenv"
	"warren/jail"
	"warren/meta"
)

var k = meta.ThreadKey{Tenant: "acme", Thread: "t"}

func start(t *testing.T, ws string, quotaBytes, reserve int64) (*quota.Quotas, error) {
	t.Helper()
	return quota.Start(quota.Config{WorkspacesDir: ws, StoreDir: t.TempDir(), QuotaBytes: quotaBytes, ReserveBytes: reserve, Logger: hclog.NewNullLogger()})
}

// TestUnenforceableIsAnError: a default quota or a reserve on a
// filesystem that cannot enforce them stops the start; none asked starts.
func TestUnenforceableIsAnError(t *testing.T) {
	ws := t.TempDir()
	if btrfs, _ := diskquota.IsBtrfs(ws); btrfs {
		// A filesystem without quotas, made for the test.
		testenv.RequireRoot(t)
		ws = testenv.LoopFS(t, 64<<20, "mkfs.ext4", []string{"-q"}, "")
	}
	if _, err := start(t, ws, 0, 0); err != nil {
		t.Fatalf("no quota asked: %v", err)
	}
	for _, c := range []struct{ quota, reserve int64 }{{64 << 20, 0}, {0, 64 << 20}} {
		if _, err := start(t, ws, c.quota, c.reserve); err == nil {
			t.Errorf("quota %d and reserve %d on a filesystem without quotas: started", c.quota, c.reserve)
		}
	}
}

// TestApplyBoundsTheWorkspace: on btrfs a thread's workspace, a
// subvolume, gets its quota (its settings', else the default), and a
// write past it fails with EDQUOT; a plain folder cannot be bounded and
// is refused, never left unbounded.
func TestApplyBoundsTheWorkspace(t *testing.T) {
	testenv.RequireRoot(t)
	ws := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	q, err := start(t, ws, 64<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.DiskBytes(meta.Settings{}); got != 64<<20 {
		t.Errorf("default quota: got %d, want %d", got, 64<<20)
	}
	s := meta.Settings{DiskBytes: 16 << 20}
	if got := q.DiskBytes(s); got != 16<<20 {
		t.Errorf("a thread's quota: got %d, want %d", got, 16<<20)
	}
	root, home := threadFolders(t, ws, "t")
	if err := q.Apply(k, root, home, s); err != nil {
		t.Fatalf("apply: %v", err)
	}
	n, err := testenv.WriteUntil(filepath.Join(root, "big"), 64<<20)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("wrote %d bytes past a 16 MiB quota: got %v, want EDQUOT", n, err)
	}
	if n > 17<<20 {
		t.Errorf("wrote %d bytes under a 16 MiB quota", n)
	}

	plain := filepath.Join(ws, "acme", "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := q.Apply(meta.ThreadKey{Tenant: "acme", Thread: "plain"}, plain, "", s); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a quota on a plain folder: got %v, want ErrInvalid", err)
	}
	// Nor a plain home folder.
	sub, _ := threadFolders(t, ws, "plainhome")
	if err := q.Apply(meta.ThreadKey{Tenant: "acme", Thread: "plainhome"}, sub, plain, s); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a quota with a plain home folder: got %v, want ErrInvalid", err)
	}
}

// threadFolders makes the workspace and home subvolumes of thread
// acme/thread below ws.
func threadFolders(t *testing.T, ws, thread string) (root, home string) {
	t.Helper()
	root, home = filepath.Join(ws, "acme", thread), filepath.Join(ws, ".homes", "acme", thread)
	for _, p := range []string{root, home} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := diskquota.MakeSubvolume(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, jail.NobodyID, jail.NobodyID); err != nil {
			t.Fatal(err)
		}
	}
	return root, home
}

// writeAsJail writes n bytes of zeros to path as the jail's user, and
// returns what the writer said. The folders above path are opened to
// all: a jail reaches its folders through its mounts, the test by path.
func writeAsJail(t *testing.T, path string, n int64) (string, error) {
	t.Helper()
	for dir := filepath.Dir(path); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/zero > %s", n, path))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: jail.NobodyID, Gid: jail.NobodyID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestApplyCountsTheHome: a thread's home counts in its quota with its
// workspace: with 4 MiB, 3 MiB in the workspace leave the home no room
// for 3 more, written as the jail's user (EDQUOT); the workspace's
// writes stop at the quota less the home's bytes too; and Forget drops
// the thread's group.
func TestApplyCountsTheHome(t *testing.T) {
	testenv.RequireRoot(t)
	ws := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	q, err := start(t, ws, 4<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	root, home := threadFolders(t, ws, "t")
	if err := q.Apply(k, root, home, meta.Settings{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if out, err := writeAsJail(t, filepath.Join(root, "ws.bin"), 3<<20); err != nil {
		t.Fatalf("3 MiB in the workspace under a quota of 4: %v: %s", err, out)
	}
	syscall.Sync()
	out, err := writeAsJail(t, filepath.Join(home, "cache.bin"), 3<<20)
	if err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("3 MiB in the home beside 3 in the workspace, under a quota of 4: %v: %q; want EDQUOT", err, out)
	}
	fs, err := diskquota.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	limit, used, err := fs.ThreadLimit(root)
	if err != nil || limit != 4<<20 || used < 3<<20 || used > 4<<20 {
		t.Errorf("the thread's group: limit %d, %d bytes used (%v); want 4 MiB, between 3 and 4 used", limit, used, err)
	}
	q.Forget(k, root, home)
	if limit, _, err := fs.ThreadLimit(root); err != nil || limit != 0 {
		t.Errorf("the thread's group has limit %d (%v) after Forget; want none", limit, err)
	}
}

// TestApplyMovesAnOldLimit: a thread bound before homes has its limit
// on its workspace's own group and data in it; Apply with its new home
// moves the limit to the thread's group: the workspace grows past the
// old limit, and workspace and home stop together at the new one.
func TestApplyMovesAnOldLimit(t *testing.T) {
	testenv.RequireRoot(t)
	ws := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	fs, err := diskquota.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	root, home := threadFolders(t, ws, "old")
	if err := fs.Limit(root, 2<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WriteUntil(filepath.Join(root, "f"), 1<<20); err != nil {
		t.Fatal(err)
	}
	syscall.Sync()
	q, err := start(t, ws, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Apply(k, root, home, meta.Settings{DiskBytes: 8 << 20}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if n, err := testenv.WriteUntil(filepath.Join(root, "g"), 3<<20); err != nil {
		t.Fatalf("the workspace wrote %d of 3 MiB more under its new quota of 8: %v", n, err)
	}
	n, err := testenv.WriteUntil(filepath.Join(home, "h"), 8<<20)
	if !errors.Is(err, syscall.EDQUOT) || n > 5<<20 {
		t.Fatalf("the home wrote %d bytes beside 4 MiB of workspace under 8 MiB: %v; want EDQUOT by 4 MiB", n, err)
	}
}

// TestRepoFolderJoinsTheReserve: a snapshot repository made on the
// workspaces' btrfs is a subvolume, so the reserve counts it.
func TestRepoFolderJoinsTheReserve(t *testing.T) {
	testenv.RequireRoot(t)
	ws := testenv.LoopFS(t, 384<<20, "mkfs.btrfs", []string{"-q"}, "")
	q, err := start(t, ws, 0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(ws, "snapshots", "acme")
	if err := q.MakeRepoFolder(dir); err != nil {
		t.Fatalf("make the repository folder: %v", err)
	}
	if sub, err := diskquota.IsSubvolume(dir); err != nil || !sub {
		t.Errorf("the repository folder is not a subvolume: %v %v", sub, err)
	}
	if err := q.MakeRepoFolder(dir); err != nil {
		t.Errorf("make it again: %v", err)
	}
	q.Checkpointed(k) // sets the reserve again; logs, never fails the caller
}
