package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/testenv"
	"warren/meta"
)

const mib = 1 << 20

// randomBytes is n bytes no other call returns (so no two writes share
// content, and compression saves nothing).
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 1})
	r.Read(b)
	return b
}

// writeRaw writes path of thread with content, through the file API.
func writeRaw(t *testing.T, ctx context.Context, c *client.Client, tenant, thread, path string, content []byte) {
	t.Helper()
	if _, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: path}, bytes.NewReader(content)); err != nil {
		t.Fatalf("write %s of %s: %v", path, thread, err)
	}
}

// checkpointIDs lists the ids of thread's checkpoints, oldest first.
func checkpointIDs(t *testing.T, ctx context.Context, c *client.Client, tenant, thread string) (api.CheckpointsResponse, []string) {
	t.Helper()
	out, err := c.History().Checkpoints(ctx, tenant, thread)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cp := range out.Checkpoints {
		ids = append(ids, cp.ID)
	}
	return out, ids
}

// TestSnapshotQuota: a thread that rewrites a file and checkpoints each
// turn stays within its snapshot quota: each checkpoint counts the bytes
// it added, the oldest go to make room, and usage shows the sum against
// the quota. A checkpoint that cannot fit even with every droppable one
// gone is refused, 507 quota, with a message that says what the thread
// holds, its limit and what to free, and nothing kept is lost; an undo
// whose automatic checkpoint does not fit is refused the same way and
// changes nothing.
func TestSnapshotQuota(t *testing.T) {
	const turn, quota = 4 * mib, 24 * mib
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.c
	const tenant, thread = "acme", "q"
	if _, err := c.BindWith(ctx, tenant, thread, meta.Settings{SnapshotBytes: quota}); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		writeRaw(t, ctx, c, tenant, thread, "f.bin", randomBytes(uint64(i), turn))
		out, err := c.History().Checkpoint(ctx, tenant, thread, api.CheckpointRequest{Label: fmt.Sprint("turn ", i)})
		if err != nil {
			t.Fatalf("checkpoint of turn %d: %v", i, err)
		}
		if got := out.Checkpoint.OwnBytes; got != turn {
			t.Errorf("turn %d: the checkpoint's own bytes are %d, want %d (what the turn rewrote)", i, got, turn)
		}
		u, err := c.Usage(ctx, tenant, thread)
		if err != nil {
			t.Fatal(err)
		}
		if u.SnapshotQuotaBytes != quota || u.SnapshotBytes > quota || u.SnapshotBytes != int64(u.Checkpoints)*turn {
			t.Fatalf("turn %d: usage holds %d bytes in %d checkpoints against a quota of %d; want at most %d, %d a checkpoint",
				i, u.SnapshotBytes, u.Checkpoints, u.SnapshotQuotaBytes, quota, turn)
		}
	}
	before, ids := checkpointIDs(t, ctx, c, tenant, thread)
	if len(ids) != quota/turn || ids[0] != "cp-7" || ids[len(ids)-1] != "cp-12" {
		t.Fatalf("after 12 turns of %d bytes with a quota of %d the thread keeps %v; want cp-7 to cp-12", turn, quota, ids)
	}

	// 22 MiB more: the new checkpoint and its parent (the head, which
	// stays) need 26 MiB, past the quota whatever goes.
	writeRaw(t, ctx, c, tenant, thread, "big.bin", randomBytes(99, 22*mib))
	_, err := c.History().Checkpoint(ctx, tenant, thread, api.CheckpointRequest{Label: "too big"})
	wantAPIError(t, "a checkpoint past the quota", err, http.StatusInsufficientStorage, api.CodeQuota,
		fmt.Sprintf("The checkpoint was refused: the thread's checkpoints hold %d bytes of its snapshot quota of %d; this checkpoint adds %d", quota, quota, 22*mib))
	wantAPIError(t, "a checkpoint past the quota", err, http.StatusInsufficientStorage, api.CodeQuota, "Nothing already kept was dropped.")
	wantAPIError(t, "a checkpoint past the quota", err, http.StatusInsufficientStorage, api.CodeQuota, "warren bind --snapshot-quota")
	after, _ := checkpointIDs(t, ctx, c, tenant, thread)
	if !slices.EqualFunc(before.Checkpoints, after.Checkpoints, func(a, b api.CheckpointInfo) bool { return a.ID == b.ID && a.OwnBytes == b.OwnBytes }) || after.Head != before.Head {
		t.Fatalf("the refused checkpoint changed the history: %+v, was %+v", after, before)
	}

	// The undo must first keep the workspace's state (big.bin) in a
	// checkpoint, which does not fit: nothing is restored.
	_, err = c.History().Undo(ctx, tenant, thread, false)
	wantAPIError(t, "an undo whose automatic checkpoint is past the quota", err, http.StatusInsufficientStorage, api.CodeQuota,
		`The automatic checkpoint "before undo" that keeps the workspace's state was refused, so nothing was restored or changed`)
	after, _ = checkpointIDs(t, ctx, c, tenant, thread)
	if !slices.EqualFunc(before.Checkpoints, after.Checkpoints, func(a, b api.CheckpointInfo) bool { return a.ID == b.ID }) || after.Head != before.Head || len(after.Redo) != 0 {
		t.Fatalf("the refused undo changed the history: %+v, was %+v", after, before)
	}
	for name, want := range map[string][]byte{"big.bin": randomBytes(99, 22*mib), "f.bin": randomBytes(11, turn)} {
		var buf bytes.Buffer
		if _, err := c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: name}, &buf); err != nil || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("after the refused undo %s holds %d bytes (%v); want what was written", name, buf.Len(), err)
		}
	}

	// Room made in the workspace: the checkpoint fits again, dropping
	// the oldest.
	if _, err := c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "big.bin"}); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, ctx, c, tenant, thread, "big.bin", randomBytes(98, 12*mib))
	if _, err := c.History().Checkpoint(ctx, tenant, thread, api.CheckpointRequest{Label: "fits"}); err != nil {
		t.Fatalf("a checkpoint that fits once the oldest go: %v", err)
	}
	if u, err := c.Usage(ctx, tenant, thread); err != nil || u.SnapshotBytes > quota {
		t.Fatalf("usage %+v, %v; want at most %d", u, err, quota)
	}
}

// TestSnapshotQuotaRebase: a file no turn changes counts once, in the
// oldest checkpoint; when that one is dropped, the next counts it, so the
// thread's total never forgets bytes its kept checkpoints reference.
func TestSnapshotQuotaRebase(t *testing.T) {
	const quota = 16 * mib
	env := startEnv(t, Config{SnapshotQuotaBytes: quota})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.c
	writeRaw(t, ctx, c, "acme", "r", "stable.bin", randomBytes(1, 8*mib))
	for i := range 8 {
		writeRaw(t, ctx, c, "acme", "r", "f.bin", randomBytes(uint64(10+i), 2*mib))
		if _, err := c.History().Checkpoint(ctx, "acme", "r", api.CheckpointRequest{}); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	out, ids := checkpointIDs(t, ctx, c, "acme", "r")
	if !slices.Equal(ids, []string{"cp-5", "cp-6", "cp-7", "cp-8"}) {
		t.Fatalf("kept %v; want cp-5 to cp-8 (10 MiB for the oldest, which holds the stable file, and 2 MiB each after)", ids)
	}
	if first := out.Checkpoints[0]; first.OwnBytes != 10*mib || first.OwnBase != "" || !first.Counted {
		t.Fatalf("the oldest kept checkpoint counts %d bytes against %q; want the whole tree, %d", first.OwnBytes, first.OwnBase, 10*mib)
	}
	if second := out.Checkpoints[1]; second.OwnBytes != 2*mib || second.OwnBase != "cp-5" {
		t.Fatalf("cp-6 counts %d bytes against %q; want %d against cp-5", second.OwnBytes, second.OwnBase, 2*mib)
	}
	if u, err := c.Usage(ctx, "acme", "r"); err != nil || u.SnapshotBytes != quota {
		t.Fatalf("usage %+v, %v; want %d snapshot bytes", u, err, quota)
	}
}

// TestSnapshotQuotaShared: two threads that hold the same content each
// count it in full, so a tenant's threads cannot share one thread's quota
// worth between them; a tenant's quota bounds all its threads together,
// and another tenant's checkpoints are not bound by it.
func TestSnapshotQuotaShared(t *testing.T) {
	const size = 10 * mib
	env := startEnv(t, Config{SnapshotQuotaBytes: 16 * mib, TenantSnapshotQuotaBytes: 25 * mib})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.c
	content := randomBytes(7, size)
	for _, thread := range []string{"a", "b"} {
		writeRaw(t, ctx, c, "acme", thread, "same.bin", content)
		if _, err := c.History().Checkpoint(ctx, "acme", thread, api.CheckpointRequest{}); err != nil {
			t.Fatalf("checkpoint of %s: %v", thread, err)
		}
		u, err := c.Usage(ctx, "acme", thread)
		if err != nil {
			t.Fatal(err)
		}
		if u.SnapshotBytes != size || u.SnapshotQuotaBytes != 16*mib {
			t.Fatalf("thread %s holds %d snapshot bytes of %d; want %d of %d: shared content counts for each thread", thread, u.SnapshotBytes, u.SnapshotQuotaBytes, size, 16*mib)
		}
	}
	// Within the thread's quota, past the tenant's.
	writeRaw(t, ctx, c, "acme", "c", "same.bin", content)
	_, err := c.History().Checkpoint(ctx, "acme", "c", api.CheckpointRequest{})
	wantAPIError(t, "a checkpoint past the tenant's quota", err, http.StatusInsufficientStorage, api.CodeQuota,
		fmt.Sprintf("the tenant's threads hold %d bytes of checkpoints (this thread 0) of the tenant's snapshot quota of %d", 2*size, 25*mib))
	if _, ids := checkpointIDs(t, ctx, c, "acme", "c"); len(ids) != 0 {
		t.Fatalf("the refused checkpoint left %v", ids)
	}
	// The thread's own quota: a second turn of 10 MiB drops nothing it
	// may (the head's parent stays), so it is refused.
	writeRaw(t, ctx, c, "acme", "a", "more.bin", randomBytes(8, size))
	_, err = c.History().Checkpoint(ctx, "acme", "a", api.CheckpointRequest{})
	wantAPIError(t, "a checkpoint past the thread's quota", err, http.StatusInsufficientStorage, api.CodeQuota,
		fmt.Sprintf("of its snapshot quota of %d", 16*mib))
	// Another tenant has a repository and a quota of its own.
	writeRaw(t, ctx, c, "other", "a", "same.bin", content)
	if _, err := c.History().Checkpoint(ctx, "other", "a", api.CheckpointRequest{}); err != nil {
		t.Fatalf("another tenant's checkpoint: %v", err)
	}
	// Deleting a thread gives its bytes back to the tenant.
	if err := c.DeleteThread(ctx, "acme", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.History().Checkpoint(ctx, "acme", "c", api.CheckpointRequest{}); err != nil {
		t.Fatalf("a checkpoint once another thread's are deleted: %v", err)
	}
	// A fork counts its whole tree for the new thread: a and c hold 20
	// MiB, and a fork of a would make it 30.
	_, err = c.History().Fork(ctx, "acme", "a", api.ForkRequest{Thread: "a2"})
	wantAPIError(t, "a fork past the tenant's quota", err, http.StatusInsufficientStorage, api.CodeQuota,
		fmt.Sprintf("The fork was refused: the tenant's threads hold %d bytes of checkpoints of the tenant's snapshot quota of %d, and the new thread would hold %d more", 2*size, 25*mib, size))
	if _, err := c.Thread(ctx, "acme", "a2"); err == nil {
		t.Fatal("the refused fork made its thread")
	}
}

// TestSnapshotsInReserve: on a btrfs with a reserve, a tenant's snapshot
// repository counts against it like the workspaces: a thread that
// rewrites a big file and checkpoints each turn is refused (507 quota)
// before the disk's free space passes the reserve, and the thread's
// snapshot quota defaults to its disk quota.
func TestSnapshotsInReserve(t *testing.T) {
	const reserve, size = 256 * mib, 24 * mib
	mnt := testenv.LoopFS(t, 512*mib, "mkfs.btrfs", []string{"-q"}, "")
	env := startEnv(t, Config{DataDir: filepath.Join(mnt, "data"), DiskReserveBytes: reserve})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.c
	if _, err := c.BindWith(ctx, "acme", "q", meta.Settings{DiskBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	if u, err := c.Usage(ctx, "acme", "q"); err != nil || u.SnapshotQuotaBytes != 64*mib {
		t.Fatalf("usage %+v, %v: want a snapshot quota of the disk quota, %d", u, err, 64*mib)
	}
	// No snapshot quota for this one: only the reserve bounds it.
	if _, err := c.BindWith(ctx, "acme", "r", meta.Settings{}); err != nil {
		t.Fatal(err)
	}
	refused := false
	for i := range 20 {
		_, err := c.Files().WriteRaw(ctx, "acme", "r", api.RawRequest{Path: "f.bin"}, bytes.NewReader(randomBytes(uint64(i), size)))
		if ae := (*api.APIError)(nil); errors.As(err, &ae) && ae.Code == api.CodeQuota {
			t.Logf("turn %d: the workspace's write reached the reserve", i)
			refused = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		unix.Sync()
		_, err = c.History().Checkpoint(ctx, "acme", "r", api.CheckpointRequest{})
		var st unix.Statfs_t
		if serr := unix.Statfs(mnt, &st); serr != nil {
			t.Fatal(serr)
		}
		free := int64(st.Bavail) * st.Bsize
		t.Logf("turn %d: checkpoint %v; %d MiB free", i, err, free/mib)
		if free < reserve/2 {
			t.Fatalf("turn %d: the disk has %d bytes free, past the reserve of %d: the snapshots escape it", i, free, reserve)
		}
		if err != nil {
			wantAPIError(t, "a checkpoint past the reserve", err, http.StatusInsufficientStorage, api.CodeQuota, "")
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("20 checkpoints of 24 MiB each on a 512 MiB disk with a 256 MiB reserve were all taken")
	}
	// The history still works.
	if _, err := c.History().Checkpoints(ctx, "acme", "r"); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotQuotaSparse: a sparse file counts its data, not its holes:
// a 4 GiB file with 1 MiB of data fits a snapshot quota of 8 MiB, and its
// checkpoint's own bytes are its data; a later checkpoint that drops it
// keeps counting right.
func TestSnapshotQuotaSparse(t *testing.T) {
	const quota = 8 * mib
	env := startEnv(t, Config{SnapshotQuotaBytes: quota})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.c
	bound, err := c.Bind(ctx, "acme", "s")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(bound.MountPath, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randomBytes(3, mib), 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := c.History().Checkpoint(ctx, "acme", "s", api.CheckpointRequest{})
	if err != nil {
		t.Fatalf("a checkpoint of a 4 GiB sparse file with 1 MiB of data under a snapshot quota of 8 MiB: %v", err)
	}
	if cp := out.Checkpoint; cp.OwnBytes != mib || cp.RefBytes != mib {
		t.Fatalf("the sparse file's checkpoint counts %d bytes (tree %d); want its data, %d", cp.OwnBytes, cp.RefBytes, mib)
	}
	writeRaw(t, ctx, c, "acme", "s", "f.bin", randomBytes(4, 2*mib))
	if out, err = c.History().Checkpoint(ctx, "acme", "s", api.CheckpointRequest{}); err != nil || out.Checkpoint.OwnBytes != 2*mib || out.Checkpoint.RefBytes != 3*mib {
		t.Fatalf("a second checkpoint: %+v, %v; want 2 MiB of its own in 3 MiB", out.Checkpoint, err)
	}
	if u, err := c.Usage(ctx, "acme", "s"); err != nil || u.SnapshotBytes != 3*mib {
		t.Fatalf("usage %+v, %v; want 3 MiB of snapshots", u, err)
	}
}

// TestSnapshotQuotaOldRecords: checkpoints recorded before snapshot
// quotas (no counts) hold their whole size in the meantime, and are
// counted at the thread's next checkpoint: the oldest in full, each later
// one against its parent.
func TestSnapshotQuotaOldRecords(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := env.c
	writeRaw(t, ctx, c, "acme", "o", "stable.bin", randomBytes(1, 4*mib))
	for i := range 2 {
		writeRaw(t, ctx, c, "acme", "o", "f.bin", randomBytes(uint64(10+i), mib))
		if _, err := c.History().Checkpoint(ctx, "acme", "o", api.CheckpointRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	k := meta.ThreadKey{Tenant: "acme", Thread: "o"}
	h, err := env.g.store.GetHistory(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h.Checkpoints {
		cp := &h.Checkpoints[i]
		cp.RefBytes, cp.OwnBytes, cp.OwnBase, cp.Counted = 0, 0, "", false
	}
	if _, err := env.g.store.PutHistory(ctx, h); err != nil {
		t.Fatal(err)
	}
	if u, err := c.Usage(ctx, "acme", "o"); err != nil || u.SnapshotBytes != 10*mib {
		t.Fatalf("usage of old records: %+v, %v; want their whole size, %d", u, err, 10*mib)
	}
	writeRaw(t, ctx, c, "acme", "o", "f.bin", randomBytes(12, mib))
	if _, err := c.History().Checkpoint(ctx, "acme", "o", api.CheckpointRequest{}); err != nil {
		t.Fatal(err)
	}
	out, _ := checkpointIDs(t, ctx, c, "acme", "o")
	want := []struct {
		own, ref int64
		base     string
	}{{5 * mib, 5 * mib, ""}, {mib, 5 * mib, "cp-1"}, {mib, 5 * mib, "cp-2"}}
	for i, cp := range out.Checkpoints {
		if !cp.Counted || cp.OwnBytes != want[i].own || cp.RefBytes != want[i].ref || cp.OwnBase != want[i].base {
			t.Errorf("%s: counted %v, own %d of %d against %q; want %d of %d against %q",
				cp.ID, cp.Counted, cp.OwnBytes, cp.RefBytes, cp.OwnBase, want[i].own, want[i].ref, want[i].base)
		}
	}
	if u, err := c.Usage(ctx, "acme", "o"); err != nil || u.SnapshotBytes != 7*mib {
		t.Fatalf("usage once counted: %+v, %v; want %d", u, err, 7*mib)
	}
}
