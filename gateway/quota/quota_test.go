package quota_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/quota"
	"warren/internal/diskquota"
	"warren/internal/testenv"
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
	root := filepath.Join(ws, "acme", "t")
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := diskquota.MakeSubvolume(root); err != nil {
		t.Fatal(err)
	}
	if err := q.Apply(k, root, s); err != nil {
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
	if err := q.Apply(meta.ThreadKey{Tenant: "acme", Thread: "plain"}, plain, s); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("a quota on a plain folder: got %v, want ErrInvalid", err)
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
