package gateway

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/testenv"
)

// These tests play an allowed, non-root uid that asks for inspection
// mounts over folders it owns and then changes the folders along the path:
// a link swapped into a parent, a parent renamed away with its mount.

// attackerUID is the uid the attacking peer has.
const attackerUID = 65534

// swapTree is a folder tree an attacker owns, base/p/d, and a victim's
// folder v/d (root's, not empty) that a link can lead to.
type swapTree struct {
	base, victim string
	asked        string // base/p/d: the folder the attacker asks for
}

func newSwapTree(t *testing.T) swapTree {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	st := swapTree{base: filepath.Join(dir, "base"), victim: filepath.Join(dir, "victim")}
	st.asked = filepath.Join(st.base, "p", "d")
	for _, d := range []string{st.asked, filepath.Join(st.victim, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(st.victim, "d", "secret"), []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{st.base, filepath.Join(st.base, "p"), st.asked} {
		if err := os.Chown(d, attackerUID, attackerUID); err != nil {
			t.Fatal(err)
		}
	}
	// Registered last, so it runs first: no folder is removed through a
	// mount a failed test left.
	t.Cleanup(func() {
		for range 4 {
			for _, p := range testenv.MountsUnder(t, dir) {
				t.Errorf("mount left at %s", p)
				unix.Unmount(p, unix.MNT_DETACH)
			}
		}
	})
	return st
}

// victimCovered fails the test if anything is mounted in the victim's folder.
func (st swapTree) victimCovered(t testing.TB) bool {
	t.Helper()
	if got := testenv.MountsUnder(t, st.victim); len(got) > 0 {
		t.Errorf("the victim's folder is covered: mounts at %v", got)
		return true
	}
	return false
}

// TestInspectionMountSymlinkSwapRace asks for mounts of base/p/d as an
// allowed non-root uid while base/p is swapped, again and again, between
// the attacker's folder and a link to a root-owned folder with a d of its
// own: no mount ever covers the victim's folder, no answer is a 500, and
// every mount made is unmounted when asked.
func TestInspectionMountSymlinkSwapRace(t *testing.T) {
	st := newSwapTree(t)
	env := startEnv(t, Config{})
	ctx := context.Background()
	if _, err := env.c.Bind(ctx, "", "t"); err != nil {
		t.Fatal(err)
	}
	// base/q is the link; RENAME_EXCHANGE swaps it with base/p atomically,
	// so base/p is always one or the other.
	q := filepath.Join(st.base, "q")
	if err := os.Symlink(st.victim, q); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(st.base, "p")

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, q, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
			swaps.Add(1)
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	const tries = 300
	deadline := time.Now().Add(20 * time.Second)
	made, refused := 0, 0
	for i := 0; i < tries && time.Now().Before(deadline); i++ {
		_, err := env.g.inspections.Mount(ctx, api.MountRequest{Thread: "t", Path: st.asked, Writable: true}, attackerUID)
		if st.victimCovered(t) {
			t.Fatalf("try %d: the mount covers the victim's folder (answer: %v)", i, err)
		}
		if err != nil {
			if status, _ := call.Classify(err); status >= http.StatusInternalServerError {
				t.Fatalf("try %d: got %d (%v), want a refusal or a mount", i, status, err)
			}
			refused++
			continue
		}
		made++
		if _, err := env.g.inspections.Unmount(ctx, st.asked); err != nil {
			t.Fatalf("try %d: unmount: %v", i, err)
		}
		if got := env.live(t, st.base); len(got) > 0 && !onlyThreadMounts(env, got) {
			t.Fatalf("try %d: mounts left after unmount: %v", i, got)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d mounts made, %d refused, %d swaps", made, refused, swaps.Load())
	if made == 0 || refused == 0 {
		t.Errorf("got %d mounts and %d refusals, want some of each (the race did not run)", made, refused)
	}
}

// onlyThreadMounts reports whether every path of got is inside the data
// folder (the thread's own mount).
func onlyThreadMounts(env *testEnv, got []string) bool {
	for _, p := range got {
		if !strings.HasPrefix(p, env.cfg.DataDir+"/") {
			return false
		}
	}
	return true
}

// TestInspectionMountRestartSymlinkedParent records a mount of base/p/d,
// stops the gateway, replaces base/p with a link to a root-owned folder
// that has a d with files, and starts again: the record is dropped, and
// nothing covers the victim's folder.
func TestInspectionMountRestartSymlinkedParent(t *testing.T) {
	st := newSwapTree(t)
	store := newStore(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()

	env1 := startEnv(t, Config{DataDir: dataDir, Store: store})
	if _, err := env1.g.inspections.Mount(ctx, api.MountRequest{Thread: "t", Path: st.asked, Writable: true}, attackerUID); err != nil {
		t.Fatal(err)
	}
	if err := env1.g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(st.base, "p"), filepath.Join(st.base, "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(st.victim, filepath.Join(st.base, "p")); err != nil {
		t.Fatal(err)
	}

	env2 := startEnv(t, Config{DataDir: dataDir, Store: store})
	st.victimCovered(t)
	ms, err := env2.c.Mounts(ctx)
	if err != nil || len(ms) != 0 {
		t.Errorf("got mounts %+v (%v), want the record dropped", ms, err)
	}
	if log := env2.logBuf.String(); !strings.Contains(log, "restore: dropping inspection mount") || !strings.Contains(log, "symbolic link") {
		t.Errorf("the dropped record is not logged with its reason; log:\n%s", log)
	}
	if got, err := os.ReadFile(filepath.Join(st.victim, "d", "secret")); err != nil || string(got) != "root's" {
		t.Errorf("the victim's file: got %q, %v", got, err)
	}
}

// mountMovedAway mounts thread t's workspace at st.asked for the
// attacker, moves it away with its parent (base/p renamed base/r) and
// makes a fresh empty folder at st.asked. It returns where the mount is.
func (st swapTree) mountMovedAway(t *testing.T, env *testEnv) string {
	t.Helper()
	if _, err := env.g.inspections.Mount(context.Background(), api.MountRequest{Thread: "t", Path: st.asked}, attackerUID); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(st.base, "r", "d")
	if err := os.Rename(filepath.Join(st.base, "p"), filepath.Join(st.base, "r")); err != nil {
		t.Fatal(err)
	}
	mustMounted(t, moved, true)
	if err := os.MkdirAll(st.asked, 0o755); err != nil {
		t.Fatal(err)
	}
	return moved
}

// TestInspectionUnmountTellsTheTruth moves a mounted folder away (its
// parent renamed) and makes a fresh empty folder at the old path: DELETE
// of the path answers "unmounted" only because the mount, wherever it
// went, is gone.
func TestInspectionUnmountTellsTheTruth(t *testing.T) {
	st := newSwapTree(t)
	env := startEnv(t, Config{})
	ctx := context.Background()
	st.mountMovedAway(t, env)

	resp := rawRequest(t, env.g.SocketPath(), http.MethodDelete, "/v1/mounts?path="+st.asked, nil)
	if resp.status == http.StatusOK {
		if got := testenv.MountsUnder(t, st.base); len(got) > 0 {
			t.Errorf("DELETE answered %d %s, but mounts are left: %v", resp.status, resp.body, got)
		}
	} else {
		t.Errorf("DELETE: got %d %s, want 200", resp.status, resp.body)
	}
	ms, err := env.c.Mounts(ctx)
	if err != nil || len(ms) != 0 {
		t.Errorf("got mounts %+v (%v) after DELETE, want none", ms, err)
	}
}

// TestInspectionUnmountDoesNotBlockClose moves a mounted folder away and
// has root mount something else (a tmpfs) at the old path: the DELETE of
// the inspection mount takes down its own mount only, and neither it nor
// a close of the thread at the same time hangs.
func TestInspectionUnmountDoesNotBlockClose(t *testing.T) {
	st := newSwapTree(t)
	env := startEnv(t, Config{})
	ctx := context.Background()
	moved := st.mountMovedAway(t, env)
	if err := unix.Mount("tmpfs", st.asked, "tmpfs", 0, "size=1m"); err != nil {
		testenv.CannotRun(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(st.asked, unix.MNT_DETACH) })

	unmounted := make(chan error, 1)
	go func() {
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := env.g.inspections.Unmount(uctx, st.asked)
		unmounted <- err
	}()
	select {
	case err := <-unmounted:
		if err != nil {
			t.Errorf("unmount: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("unmount did not return within 10s")
	}
	// Then the thread's close, which waits for the thread's lock.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := env.g.threads.CloseThread(cctx, "", "t"); err != nil {
		t.Errorf("close of the thread after the unmount of its inspection mount: %v", err)
	}
	mustMounted(t, moved, false)
	if e := mountAt(t, st.asked); e.Type != "tmpfs" {
		t.Errorf("%s: got a %s mount, want root's tmpfs left alone", st.asked, e.Type)
	}
}

// TestInspectionUnmountInUse unmounts an inspection mount that a process
// still uses (its working folder is there): the answer comes within the
// drain bound, says the mount is in use, and the mount is out of the tree.
func TestInspectionUnmountInUse(t *testing.T) {
	env := startEnv(t, Config{unmountDrain: 200 * time.Millisecond})
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := env.c.Mount(ctx, api.MountRequest{Thread: "t", Path: dir}); err != nil {
		t.Fatal(err)
	}
	// A process, not this one, which serves the mount: it enters the
	// folder after its exec (a forked child of the server must not), and
	// says so.
	holder := exec.Command("/bin/sh", "-c", `cd "$1" && echo in && exec sleep 60`, "sh", dir)
	holder.Dir = "/"
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "in\n" {
		t.Fatalf("holder: got %q, %v; want it in %s", line, err, dir)
	}

	resp := rawRequest(t, env.g.SocketPath(), http.MethodDelete, "/v1/mounts?path="+dir, nil)
	if resp.status != http.StatusOK || !strings.Contains(string(resp.body), `"inUse":true`) {
		t.Errorf("DELETE of a mount in use: got %d %s, want 200 with inUse", resp.status, resp.body)
	}
	mustMounted(t, dir, false)
}

// TestInspectionMountNotInsideFUSE moves a writable inspection mount away
// from its recorded path and asks for a mount in a folder inside it: the
// walk refuses to go through a FUSE mount (here one this daemon serves),
// whatever the recorded paths say.
func TestInspectionMountNotInsideFUSE(t *testing.T) {
	st := newSwapTree(t)
	env := startEnv(t, Config{})
	ctx := context.Background()
	if _, err := env.g.inspections.Mount(ctx, api.MountRequest{Thread: "t", Path: st.asked, Writable: true}, attackerUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(st.base, "p"), filepath.Join(st.base, "r")); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(st.base, "r", "d", "sub")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(inside, attackerUID, attackerUID); err != nil {
		t.Fatal(err)
	}
	_, err := env.g.inspections.Mount(ctx, api.MountRequest{Thread: "other", Path: inside}, attackerUID)
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "FUSE") {
		t.Errorf("mount inside a moved inspection mount: got %v, want ErrInvalid (a FUSE mount)", err)
	}
	mustMounted(t, inside, false)
	if _, err := env.g.inspections.Unmount(ctx, st.asked); err != nil {
		t.Errorf("unmount: %v", err)
	}
}
