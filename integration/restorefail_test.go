package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/internal/testenv"
)

// syncFS commits the filesystem of dir (its journal too).
func syncFS(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.Syncfs(fd))
}

// waitNoneOpenDeleted waits until no process holds a descriptor of a
// removed file under dir: its blocks are not free until then.
func waitNoneOpenDeleted(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		held := ""
		fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
		for _, fd := range fds {
			target, err := os.Readlink(fd)
			if err == nil && strings.HasPrefix(target, dir+"/") && strings.HasSuffix(target, " (deleted)") {
				held = fd + " -> " + target
				break
			}
		}
		if held == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still open 30 s after its removal", held)
		}
	}
}

// The restores that cannot finish: over the thread's disk quota, on a
// full disk, with an object of the repository missing or corrupt. Each
// must end cleanly: the call answers the reason, the workspace is as it
// was before the restore, a thread.restore_failed event says it, and the
// thread's history works on (checkpoint, list, undo to another
// checkpoint, fork), also after a restart.

// failScene is a thread whose undo cannot finish once broken.
type failScene struct {
	d      *daemon
	thread string
	mp     string
	big    []byte // the content of big.bin, which only cp-1 holds
}

// newFailScene makes the thread's history: cp-1 holds a.txt ("old") and
// big.bin (size random bytes, so that its object is stored raw), cp-2
// a.txt ("new") alone, and the workspace is at cp-2. The undo to cp-1
// writes a.txt first (paths in order), then big.bin.
func newFailScene(t *testing.T, d *daemon, thread string, size int, bindArgs ...string) *failScene {
	t.Helper()
	mp := strings.TrimSpace(d.mustWarren(append([]string{"bind", "--thread", thread}, bindArgs...)...))
	d.mustWarren("exec", "--thread", thread, "--", fmt.Sprintf("printf old > a.txt && head -c %d /dev/urandom > big.bin", size))
	big, err := os.ReadFile(filepath.Join(mp, "big.bin"))
	must(t, err)
	if len(big) != size {
		t.Fatalf("big.bin holds %d bytes, want %d", len(big), size)
	}
	d.mustWarren("checkpoint", "--thread", thread, "--label", "with big")
	d.mustWarren("exec", "--thread", thread, "--", "rm big.bin && printf new > a.txt")
	d.mustWarren("checkpoint", "--thread", thread, "--label", "without big")
	return &failScene{d: d, thread: thread, mp: mp, big: big}
}

// bigObject returns the path of big.bin's object in the tenant's
// snapshot repository (a loose object, named by its SHA-256).
func (s *failScene) bigObject(t *testing.T, snapshots string) string {
	t.Helper()
	h := fmt.Sprintf("%x", sha256.Sum256(s.big))
	paths, err := filepath.Glob(filepath.Join(snapshots, "*", "objects", h[:2], h[2:]))
	must(t, err)
	if len(paths) != 1 {
		t.Fatalf("big.bin's object %s in %s: found %v, want one loose object", h, snapshots, paths)
	}
	return paths[0]
}

// failUndo breaks nothing itself: the caller broke the scene. It undoes
// to cp-1, wants the refusal status, code and message, the workspace as
// it was, and the event; then it shows the history working, before and
// after a restart.
func (s *failScene) failUndo(t *testing.T, status int, code, msg string) {
	t.Helper()
	d := s.d
	c := d.client()
	ctx := context.Background()
	before := captureTree(t, s.mp)
	events := d.subscribe(s.thread)
	defer events.stop()
	_, err := c.History().Undo(ctx, "", s.thread, false)
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code || !strings.Contains(ae.Message, msg) {
		t.Fatalf("undo to cp-1: %v (%#v); want %d %s saying %q", err, ae, status, code, msg)
	}
	if !strings.Contains(ae.Message, "left as it was before the undo") {
		t.Errorf("undo's message %q does not say what the workspace holds", ae.Message)
	}
	t.Logf("undo: %d %s: %s", ae.Status, ae.Code, ae.Message)
	wantTree(t, "after a failed undo", s.mp, before)
	ev, ok := events.waitFor(10*time.Second, func(ev api.Event) bool { return ev.Type == api.EventThreadRestoreFailed })
	if !ok || ev.Checkpoint != "cp-1" || ev.Op != "undo" || !slices.Contains(ev.Paths, "a.txt") || !strings.Contains(ev.Message, "could not finish") {
		t.Fatalf("thread.restore_failed: %+v (found %v); events %s", ev, ok, events)
	}
	for _, ev := range events.all() {
		if ev.Type == api.EventThreadRestored {
			t.Fatalf("a failed undo said it restored: %+v", ev)
		}
	}
	s.historyWorks(t, "after the failed undo", before, "cp-3")
	d.stop()
	d.start()
	wantTree(t, "after a restart that followed a failed undo", s.mp, before)
	s.historyWorks(t, "after a restart", before, "cp-4")
}

// historyWorks lists the checkpoints (the head is still cp-2: the failed
// undo moved nothing), takes one
// (id next) of a change, undoes it (back to cp-2, as before), and forks
// the thread at cp-2.
func (s *failScene) historyWorks(t *testing.T, when string, before treeState, next string) {
	t.Helper()
	d := s.d
	c := d.client()
	ctx := context.Background()
	list, err := c.History().Checkpoints(ctx, "", s.thread)
	if err != nil || list.Head != "cp-2" {
		t.Fatalf("%s: checkpoints: %+v %v; want the head at cp-2", when, list, err)
	}
	if f := list.FailedRestore; f == nil || f.Op != "undo" || f.To != "cp-1" || f.Reason == "" || f.EndedAt.Before(f.StartedAt) {
		t.Fatalf("%s: the failed restore in the list: %+v; want the undo to cp-1 with its reason", when, f)
	}
	if out := d.mustWarren("checkpoints", "--thread", s.thread); !strings.Contains(out, "last failed restore: undo to cp-1 at ") {
		t.Fatalf("%s: warren checkpoints does not show the failed restore:\n%s", when, out)
	}
	d.mustWarren("exec", "--thread", s.thread, "--", "printf c > c.txt")
	cp, err := c.History().Checkpoint(ctx, "", s.thread, api.CheckpointRequest{Label: "after"})
	if err != nil || cp.Checkpoint.ID != next {
		t.Fatalf("%s: checkpoint: %+v %v; want %s", when, cp, err, next)
	}
	u, err := c.History().Undo(ctx, "", s.thread, false)
	if err != nil || u.To != "cp-2" {
		t.Fatalf("%s: undo to cp-2: %+v %v", when, u, err)
	}
	wantTree(t, when+": after the undo to cp-2", s.mp, before)
	f, err := c.History().Fork(ctx, "", s.thread, api.ForkRequest{Checkpoint: "cp-2", Thread: s.thread + "-" + next})
	if err != nil {
		t.Fatalf("%s: fork at cp-2: %v", when, err)
	}
	wantTree(t, when+": the fork at cp-2", f.MountPath, before)
}

// TestRestoreOverQuota: an undo to a checkpoint whose big file no longer
// fits in the thread's disk quota (lowered since), and one of a big file
// rewritten in place (the old content is written beside the new), are
// refused with 507 quota, naming the file, and change nothing. On the
// code before the restore ended cleanly, the undo answered 500 and left
// a.txt restored, and every later checkpoint call answered 500.
func TestRestoreOverQuota(t *testing.T) {
	mnt := testenv.LoopFS(t, 512<<20, "mkfs.btrfs", []string{"-q"}, "")
	// The snapshot quota is out of the way (it defaults to the disk
	// quota, which the checkpoints of these 40 and 80 MiB files pass):
	// this test is about the workspace's quota.
	d := newDaemonAt(t, filepath.Join(mnt, "data"), "--disk-quota", fmt.Sprint(64<<20), "--snapshot-quota", fmt.Sprint(1<<30))
	s := newFailScene(t, d, "quota", 80<<20, "--disk", fmt.Sprint(128<<20))
	d.mustWarren("bind", "--thread", "quota", "--disk", fmt.Sprint(64<<20))
	s.failUndo(t, http.StatusInsufficientStorage, api.CodeQuota, `does not fit in the thread's disk quota: "big.bin" (83886080 bytes) was not written`)

	// Without a lowered quota: a 40 MiB file rewritten in place, whose
	// undo writes the old content beside the new (a file is replaced
	// atomically), 80 MiB for a quota of 64.
	mp := d.bind("", "inplace")
	d.mustWarren("exec", "--thread", "inplace", "--", "printf old > a.txt && head -c 40M /dev/urandom > big.bin")
	d.mustWarren("checkpoint", "--thread", "inplace")
	d.mustWarren("exec", "--thread", "inplace", "--", "printf new > a.txt && head -c 40M /dev/urandom > big.bin")
	d.mustWarren("checkpoint", "--thread", "inplace")
	before := captureTree(t, mp)
	_, err := d.client().History().Undo(context.Background(), "", "inplace", false)
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Code != api.CodeQuota || !strings.Contains(ae.Message, `"big.bin" (41943040 bytes) was not written`) {
		t.Fatalf("undo of a 40 MiB file rewritten in place, quota 64 MiB: %v; want 507 quota naming big.bin", err)
	}
	wantTree(t, "after the failed undo of a file rewritten in place", mp, before)
	d.mustWarren("checkpoint", "--thread", "inplace")
}

// TestRestoreFullDisk: an undo whose big file does not fit on the
// workspaces' disk (a small ext4 of the test's own, filled but 4 MiB) is
// refused with 507 no_space, naming the file, and changes nothing.
func TestRestoreFullDisk(t *testing.T) {
	ws := testenv.LoopFS(t, 96<<20, "mkfs.ext4", []string{"-q"}, "")
	d := newDaemon(t, "--workspaces", filepath.Join(ws, "workspaces"))
	s := newFailScene(t, d, "full", 16<<20)
	// The blocks of the removed big.bin are free once nothing holds the
	// file open (the daemon lets go of its descriptor when the kernel
	// forgets the file, a moment after the rm) and the journal committed
	// their freeing: synced before the disk is filled, and after it is
	// emptied by 4 MiB.
	waitNoneOpenDeleted(t, ws)
	syncFS(t, ws)
	filler := testenv.FillDisk(t, ws)
	st, err := os.Stat(filler)
	must(t, err)
	must(t, os.Truncate(filler, st.Size()-4<<20))
	syncFS(t, ws)
	var fsst unix.Statfs_t
	must(t, unix.Statfs(ws, &fsst))
	if free := int64(fsst.Bfree) * fsst.Bsize; free >= 16<<20 {
		t.Fatalf("the workspaces' disk has %d bytes free; want it full but 4 MiB", free)
	}
	s.failUndo(t, http.StatusInsufficientStorage, api.CodeNoSpace, `does not fit on the disk, which is full: "big.bin" (16777216 bytes) was not written`)
}

// TestRestoreMissingObject: an undo to a checkpoint whose big file's
// object was removed from the repository answers 500 saying the object
// is missing, and changes nothing.
func TestRestoreMissingObject(t *testing.T) {
	d := newDaemon(t)
	s := newFailScene(t, d, "missing", 4<<20)
	must(t, os.Remove(s.bigObject(t, filepath.Join(d.data, "snapshots"))))
	s.failUndo(t, http.StatusInternalServerError, api.CodeInternal, "an object of the snapshot repository is missing")

	// A fork at cp-1 cannot be made either: refused the same way, and
	// the thread it began is removed.
	c := d.client()
	ctx := context.Background()
	_, err := c.History().Fork(ctx, "", s.thread, api.ForkRequest{Checkpoint: "cp-1", Thread: "missing-fork"})
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusInternalServerError || !strings.Contains(ae.Message, "is missing") ||
		!strings.Contains(ae.Message, "The new thread is removed") {
		t.Fatalf("fork at cp-1: %v; want 500 saying the object is missing and the thread removed", err)
	}
	if _, err := c.History().Checkpoints(ctx, "", "missing-fork"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the thread of a fork that failed: %v; want it not found", err)
	}
	if _, err := c.History().Fork(ctx, "", s.thread, api.ForkRequest{Checkpoint: "cp-2", Thread: "missing-fork"}); err != nil {
		t.Fatalf("fork at cp-2 into the name of the fork that failed: %v", err)
	}
}

// TestRestoreCorruptObject: an undo to a checkpoint whose big file's
// object has wrong bytes (its last one flipped) answers 500 saying it
// fails its digest, and changes nothing.
func TestRestoreCorruptObject(t *testing.T) {
	d := newDaemon(t)
	s := newFailScene(t, d, "corrupt", 4<<20)
	obj := s.bigObject(t, filepath.Join(d.data, "snapshots"))
	f, err := os.OpenFile(obj, os.O_RDWR, 0)
	must(t, err)
	st, err := f.Stat()
	must(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, st.Size()-1)
	must(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, st.Size()-1)
	must(t, err)
	must(t, f.Close())
	s.failUndo(t, http.StatusInternalServerError, api.CodeInternal, "an object of the snapshot repository fails its digest")

	// A revert to cp-1 fails the same way, and changes nothing either.
	before := captureTree(t, s.mp)
	_, err = d.client().History().Revert(context.Background(), "", s.thread, "cp-1", false)
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusInternalServerError || !strings.Contains(ae.Message, "The revert to cp-1 could not finish") {
		t.Fatalf("revert to cp-1: %v; want 500 saying it could not finish", err)
	}
	wantTree(t, "after a failed revert", s.mp, before)
}
