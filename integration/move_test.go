package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"warren/api"
	"warren/internal/testenv"
	"warren/snapshot/replica"
)

// The move tests: two servers on one etcd cluster and one S3 store, each
// with a data folder of its own and nothing shared on disk. A thread's
// owner dies for good (killed, its workspaces out of reach); with
// --on-unreachable restore the server that takes the thread over
// restores the newest checkpoint the dead one copied to the store.

// moveCluster is an etcd cluster and an S3 server, with the flags of a
// server that copies its checkpoints to a prefix of the store.
type moveCluster struct {
	*hostCluster
	s3 *testenv.S3
}

func newMoveCluster(t testing.TB) *moveCluster {
	t.Helper()
	// The store first: its cleanup runs after the daemons'.
	srv := testenv.S3Server(t)
	srv.UseCredentials(t)
	srv.MakeBucket(t, "warren")
	return &moveCluster{hostCluster: newHostCluster(t), s3: srv}
}

// storeURL is the --snapshots value of prefix.
func (c *moveCluster) storeURL(prefix string) string {
	return c.s3.URL("warren", prefix)
}

// mover starts a server with host id id that copies its checkpoints to
// prefix and restores a moved thread from there.
func (c *moveCluster) mover(id, prefix string, extra ...string) *daemon {
	c.t.Helper()
	return c.host(id, append([]string{"--snapshots", c.storeURL(prefix), "--on-unreachable", "restore", "--snapshot-pending-every", "100ms"}, extra...)...)
}

// bucket is a client of the test's bucket, for looking at and spoiling
// what the servers put there.
func (c *moveCluster) bucket(t *testing.T) *minio.Client {
	t.Helper()
	mc, err := minio.New(c.s3.Host, &minio.Options{Creds: credentials.NewStaticV4(c.s3.AccessKey, c.s3.SecretKey, ""), Region: c.s3.Region})
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

// waitCopied waits until every checkpoint of thread on d is in the store.
func waitCopied(t testing.TB, d *daemon, thread string) []api.CheckpointInfo {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		list, err := d.client().History().Checkpoints(context.Background(), "", thread)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Checkpoints) > 0 && !slices.ContainsFunc(list.Checkpoints, func(c api.CheckpointInfo) bool { return !c.Replicated }) {
			return list.Checkpoints
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints of %s not copied to the store after a minute: %+v", thread, list)
		}
	}
}

// loseDisk kills d and takes its workspaces out of reach, as a host that
// died for good: another server on this machine could otherwise reach
// them, which a shared disk would give, not the case here.
func loseDisk(t testing.TB, d *daemon) {
	t.Helper()
	d.kill9()
	ws := filepath.Join(d.data, "workspaces")
	must(t, os.Rename(ws, ws+"-lost"))
}

// TestHostsMoveWithCheckpoint: thread t1 is bound on A, changed and
// checkpointed twice (both copied to the store), then checkpointed once
// more while the store hangs (not copied), then changed again. A dies
// with its disk. B takes t1 over: it restores cp-2, the last copied, into
// a workspace of its own; the first command gets the note once; cp-3 is
// gone from the history; undo on B reaches cp-1, and revert cp-2 comes
// back. A, started again with its disk back, serves none of it.
func TestHostsMoveWithCheckpoint(t *testing.T) {
	c := newMoveCluster(t)
	a := c.mover("host-a", "move")
	b := c.mover("host-b", "move")
	mp := a.bind("default", "t1")
	a.mustWarren("exec", "--thread", "t1", "--", "echo one > f && mkdir -p d/e && ln -s f l && chmod 750 d && head -c 300000 /dev/urandom > big")
	s1 := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "t1", "--label", "one")
	a.mustWarren("exec", "--thread", "t1", "--", "echo two > f && rm -r d && echo new > g")
	s2 := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "t1", "--label", "two")
	cps := waitCopied(t, a, "t1")
	if len(cps) != 2 {
		t.Fatalf("checkpoints on A: %+v", cps)
	}
	if out := a.mustWarren("checkpoints", "--thread", "t1"); !strings.Contains(out, "REPLICATED") {
		t.Errorf("warren checkpoints has no REPLICATED column:\n%s", out)
	}
	// t2: checkpointed and copied, then changed; A tells the store what
	// changed since.
	a.bind("default", "t2")
	a.mustWarren("exec", "--thread", "t2", "--", "echo kept > k")
	a.mustWarren("checkpoint", "--thread", "t2")
	waitCopied(t, a, "t2")
	a.mustWarren("exec", "--thread", "t2", "--", "echo lost > x && mkdir -p y && echo lost > y/z && echo changed > k")
	waitPending(t, c.storeURL("move"), "t2", []string{"k", "x", "y", "y/z"})
	root2 := a.threadInfo("t2").Root
	// The store hangs: cp-3 is taken, acknowledged, and not copied.
	c.s3.Pause(t)
	a.mustWarren("exec", "--thread", "t1", "--", "echo three > f")
	a.mustWarren("checkpoint", "--thread", "t1", "--label", "three")
	if list, err := a.client().History().Checkpoints(context.Background(), "", "t1"); err != nil || len(list.Checkpoints) != 3 || list.Checkpoints[2].Replicated {
		t.Fatalf("checkpoints on A while the store hangs: %+v, %v; want cp-3 taken, not replicated", list, err)
	}
	a.mustWarren("exec", "--thread", "t1", "--", "echo four > f")
	rootA := a.threadInfo("t1").Root
	loseDisk(t, a)
	c.s3.Resume(t)

	events := b.subscribe("t1")
	r, _ := waitPastPinned(t, b, "t1", "cat f; ls", rootA, "host-a")
	note := "The workspace moved from host host-a to host host-b at checkpoint cp-2; changes made after it on host-a are not here. Checkpoints cp-3 were not copied before the move, and are gone."
	if r.code != 0 || r.stdout != "two\nbig\nf\ng\nl\n" {
		t.Fatalf("B's first command after the move: %v", r)
	}
	if r.stderr != "warren: "+note+"\n" {
		t.Errorf("B's first command's stderr: %q\nwant the note %q", r.stderr, note)
	}
	info := b.threadInfo("t1")
	if info.HostID != "host-b" || !strings.HasPrefix(info.Root, b.data) {
		t.Errorf("binding after the move: host %q, root %q; want host-b in %s", info.HostID, info.Root, b.data)
	}
	wantTree(t, "the workspace B restored", info.MountPath, s2)
	if r := b.run(20*time.Second, "exec", "--thread", "t1", "--", "true"); r.code != 0 || r.stderr != "" {
		t.Errorf("B's second command: %v; want no note again", r)
	}
	if ev, ok := events.waitFor(10*time.Second, func(ev api.Event) bool { return ev.Type == api.EventThreadMoved }); !ok || ev.Message != note || ev.Checkpoint != "cp-2" {
		t.Errorf("thread.moved event: %+v (seen %v)", ev, ok)
	}
	if n := events.count(func(ev api.Event) bool { return ev.Type == api.EventThreadMoved }); n != 1 {
		t.Errorf("%d thread.moved events, want 1", n)
	}

	list := b.mustWarren("checkpoints", "--thread", "t1")
	if strings.Contains(list, "cp-3") || !strings.Contains(list, "cp-1") || !strings.Contains(list, "cp-2") {
		t.Errorf("checkpoints on B: want cp-1 and cp-2, not cp-3:\n%s", list)
	}
	out := b.mustWarren("undo", "--thread", "t1")
	if !strings.Contains(out, "undo: at cp-1") {
		t.Fatalf("undo on B: %q", out)
	}
	wantTree(t, "an undo on B, to a checkpoint A took", info.MountPath, s1)
	b.mustWarren("revert", "--thread", "t1", "cp-2")
	wantTree(t, "a revert on B", info.MountPath, s2)
	// B's own checkpoints go to the store too, on top of A's.
	b.mustWarren("exec", "--thread", "t1", "--", "echo five > f")
	b.mustWarren("checkpoint", "--thread", "t1", "--label", "five")
	if cps := waitCopied(t, b, "t1"); len(cps) != 3 || cps[2].HostID != "host-b" {
		t.Errorf("checkpoints on B after its own: %+v", cps)
	}

	r, _ = waitPastPinned(t, b, "t2", "cat k", root2, "host-a")
	if !strings.HasPrefix(r.stderr, "warren: The workspace moved from host host-a to host host-b at checkpoint cp-1; changes made after it on host-a are not here. Paths changed there after it, as of ") ||
		!strings.HasSuffix(r.stderr, ": k, x, y, y/z.\n") || r.stdout != "kept\n" {
		t.Errorf("t2's first command on B: %v; want the note with the paths changed after cp-1", r)
	}

	// A comes back with its disk: the thread is B's.
	must(t, os.Rename(filepath.Join(a.data, "workspaces-lost"), filepath.Join(a.data, "workspaces")))
	a.start()
	want := pinnedMessage(info.Root, "host-b")
	if r := a.run(20*time.Second, "exec", "--thread", "t1", "--", "cat f"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("A, back, on the moved thread: %v\nwant exit 1 and %q", r, want)
	}
	if out := b.mustWarren("exec", "--thread", "t1", "--", "cat f"); out != "five\n" {
		t.Errorf("B after A came back: %q", out)
	}
}

// TestHostsMoveBadDays: a thread with no copied checkpoint starts afresh
// (the seed command runs); a thread whose copy in the store is corrupt is
// refused by digest, with nothing served and nothing kept, until the
// store holds a sound copy again.
func TestHostsMoveBadDays(t *testing.T) {
	c := newMoveCluster(t)
	a := c.mover("host-a", "bad")
	b := c.mover("host-b", "bad", "--seed-command", "echo seeded > SEED")

	// fresh: bound and changed on A, never checkpointed.
	a.bind("default", "fresh")
	a.mustWarren("exec", "--thread", "fresh", "--", "echo lost > f")
	// spoiled: checkpointed and copied, then its packs spoiled.
	mp := a.bind("default", "spoiled")
	a.mustWarren("exec", "--thread", "spoiled", "--", "head -c 100000 /dev/urandom > data && echo x > small")
	s1 := captureTree(t, mp)
	a.mustWarren("checkpoint", "--thread", "spoiled")
	waitCopied(t, a, "spoiled")
	rootFresh, rootSpoiled := a.threadInfo("fresh").Root, a.threadInfo("spoiled").Root
	loseDisk(t, a)

	r, _ := waitPastPinned(t, b, "fresh", "ls", rootFresh, "host-a")
	if r.code != 0 || r.stdout != "SEED\n" || r.stderr != "" {
		t.Errorf("a moved thread without a copied checkpoint: %v; want a fresh, seeded workspace and no note", r)
	}

	// The store out of reach: refused, and tried again by the next call.
	c.s3.Kill(t)
	r, _ = waitPastPinned(t, b, "spoiled", "cat small", rootSpoiled, "host-a")
	if r.code != 1 || !strings.Contains(r.stderr, "The snapshot store is unreachable") {
		t.Errorf("a move while the store is out of reach: %v; want a refusal saying so", r)
	}
	c.s3.Restart(t)

	ctx := context.Background()
	mc := c.bucket(t)
	saved := map[string][]byte{}
	for obj := range mc.ListObjects(ctx, "warren", minio.ListObjectsOptions{Prefix: "bad/packs/", Recursive: true}) {
		must(t, obj.Err)
		o, err := mc.GetObject(ctx, "warren", obj.Key, minio.GetObjectOptions{})
		must(t, err)
		body, err := io.ReadAll(o)
		o.Close()
		must(t, err)
		saved[obj.Key] = body
		spoiled := bytes.Clone(body)
		spoiled[len(spoiled)-10] ^= 0xff // past the head: an object's bytes
		_, err = mc.PutObject(ctx, "warren", obj.Key, bytes.NewReader(spoiled), int64(len(spoiled)), minio.PutObjectOptions{})
		must(t, err)
	}
	if len(saved) == 0 {
		t.Fatal("no packs in the store")
	}
	for range 2 {
		r, _ = waitPastPinned(t, b, "spoiled", "cat small", rootSpoiled, "host-a")
		if r.code != 1 || !strings.Contains(r.stderr, "fails its checks") {
			t.Errorf("a moved thread whose copy is corrupt: %v; want a refusal saying the copy fails its checks", r)
		}
	}
	if info, ok := b.listed("spoiled"); !ok || info.HostID != "host-a" {
		t.Errorf("the refused move changed the binding: %+v (listed %v)", info, ok)
	}
	root, err := filepath.Glob(filepath.Join(b.data, "workspaces", "*", "spoiled*"))
	if err != nil || len(root) != 0 {
		t.Errorf("the refused move left a workspace on B: %v, %v", root, err)
	}
	// Sound again: the move goes through.
	for key, body := range saved {
		_, err := mc.PutObject(ctx, "warren", key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		must(t, err)
	}
	r, _ = waitPastPinned(t, b, "spoiled", "cat small", rootSpoiled, "host-a")
	if r.code != 0 || r.stdout != "x\n" || !strings.Contains(r.stderr, "at checkpoint cp-1") {
		t.Fatalf("the move once the store is sound: %v", r)
	}
	wantTree(t, "the workspace B restored", b.threadInfo("spoiled").MountPath, s1)
}

// TestHostsUploadKill9: a server killed -9 in the middle of an upload (some
// of the checkpoint's packs in the store, not its manifest) finishes it
// at its next start.
func TestHostsUploadKill9(t *testing.T) {
	c := newMoveCluster(t)
	d := c.mover("host-c", "kill")
	d.bind("default", "big")
	mc := c.bucket(t)
	ctx := context.Background()
	count := func(prefix string) int {
		n := 0
		for obj := range mc.ListObjects(ctx, "warren", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			must(t, obj.Err)
			n++
		}
		return n
	}
	var tree string
	for try := 1; ; try++ {
		// Big enough to take several packs, each a PUT of its own.
		d.mustWarren("exec", "--thread", "big", "--", fmt.Sprintf("head -c 40000000 /dev/urandom > big%d && for i in $(seq 200); do echo $i.%d > small$i; done", try, try))
		packs := count("kill/packs/")
		cp, err := d.client().History().Checkpoint(ctx, "", "big", api.CheckpointRequest{})
		must(t, err)
		tree = cp.Checkpoint.Tree
		mid := false
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if count("kill/trees/"+tree) > 0 {
				break // done before the kill: again, with new content
			}
			if count("kill/packs/") > packs {
				d.kill9()
				mid = count("kill/trees/"+tree) == 0
				break
			}
		}
		if mid {
			t.Logf("killed with %d of the checkpoint's packs in the store, on try %d", count("kill/packs/")-packs, try)
			break
		}
		if try == 5 {
			t.Fatal("the upload always ended before the kill")
		}
		if d.pid() == 0 {
			d.start()
		}
	}
	d.start()
	cps := waitCopied(t, d, "big")
	if last := cps[len(cps)-1]; last.Tree != tree {
		t.Errorf("the last checkpoint's tree is %s, want %s", last.Tree, tree)
	}
	if count("kill/trees/"+tree) != 1 {
		t.Errorf("the store lacks the manifest of the checkpoint cut short")
	}
}

// waitPending waits until the store holds, for thread (default tenant),
// the paths changed since its last checkpoint that want lists.
func waitPending(t *testing.T, url, thread string, want []string) {
	t.Helper()
	ctx := context.Background()
	store, err := replica.NewS3(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var p replica.Pending
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p, err = replica.GetPending(ctx, store, "default\x00"+thread); err == nil && slices.Equal(p.Paths, want) {
			return
		}
	}
	t.Fatalf("the store's pending changes of %s: %+v, %v; want the paths %v", thread, p, err, want)
}
