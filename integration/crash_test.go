package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/fs"
	"warren/internal/testenv"
)

// bulkFiles is how many files each thread of the crash test holds besides
// its record: enough that a delete takes a while, and that a workspace
// served half deleted shows.
const bulkFiles = 800

// crashRounds is how many times TestKill9DuringBindsRestoresDeletes kills
// the daemon; WARREN_CRASH_ROUNDS sets more.
func crashRounds(t *testing.T) int {
	if v := os.Getenv("WARREN_CRASH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("WARREN_CRASH_ROUNDS=%q", v)
		}
		return n
	}
	return 20
}

// TestKill9DuringBindsRestoresDeletes kills a real `warren serve` with
// SIGKILL at random moments of parallel binds, writes, deletes and (every
// other round) of its restore at start, for a number of rounds. Each
// round checks what operators rely on (issue 12, items 1 and 5):
//   - the killed daemon is gone (reaped) within 10 s: it never stays a
//     zombie held by a request to its own mount;
//   - a restart serves: every acknowledged record is found, by the file
//     API and by a command in the jail, which binds and mounts again;
//   - an acknowledged delete stays done; a delete cut short is finished
//     by the restart, never served half done (no thread left "deleting",
//     none bound with its workspace half removed);
//   - no mount is stacked on another, none is left without a record, and
//     no mount-point or workspace folder is left without a record.
func TestKill9DuringBindsRestoresDeletes(t *testing.T) {
	rounds := crashRounds(t)
	d := newDaemon(t)
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 12))

	type record struct {
		thread, value string
		deleteAsked   bool // a delete was sent (it may or may not have run)
		deleted       bool // a delete was acknowledged
	}
	var (
		mu      sync.Mutex
		records = map[string]*record{} // by thread; acknowledged writes only
	)
	var acked, found, lost, deletesAcked, deletesCut, stuck int
	for r := range rounds {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Binders: new threads, each with one record written and synced
		// through the mount by a command in the jail.
		for i := range 4 {
			th := fmt.Sprintf("r%d-%d", r, i)
			value := fmt.Sprintf("%s-%d", th, rng.Int64())
			wg.Go(func() {
				if _, err := c.Bind(ctx, "crash", th); err != nil {
					return
				}
				var out strings.Builder
				code, err := c.Exec(ctx, "crash", th, api.ExecRequest{
					Command: "mkdir /workspace/bulk && cd /workspace/bulk && seq " + strconv.Itoa(bulkFiles) + " | xargs touch && " +
						"printf %s " + value + " > /workspace/rec && sync /workspace/rec",
				}, &out, &out)
				if err != nil || code != 0 {
					return
				}
				mu.Lock()
				records[th] = &record{thread: th, value: value}
				mu.Unlock()
			})
		}
		// Deleters: threads of earlier rounds.
		mu.Lock()
		var victims []*record
		for _, rec := range records {
			if !rec.deleteAsked && len(victims) < 3 && rng.IntN(2) == 0 {
				rec.deleteAsked = true
				victims = append(victims, rec)
			}
		}
		mu.Unlock()
		for _, rec := range victims {
			wg.Go(func() {
				if err := c.DeleteThread(ctx, "crash", rec.thread); err == nil {
					mu.Lock()
					rec.deleted = true
					mu.Unlock()
				}
			})
		}
		// Restores: re-binding (and so remounting) earlier threads.
		wg.Go(func() {
			mu.Lock()
			var ths []string
			for th, rec := range records {
				if !rec.deleteAsked {
					ths = append(ths, th)
				}
			}
			mu.Unlock()
			for _, th := range ths {
				if _, err := c.CloseThread(ctx, "crash", th); err != nil {
					return
				}
				if _, err := c.Bind(ctx, "crash", th); err != nil {
					return
				}
			}
		})
		// Load, as on a busy host: the daemon's threads are preempted
		// at any point, between reading a request and answering it too.
		stopLoad := cpuLoad(t, 2)
		time.Sleep(time.Duration(rng.IntN(2500)) * time.Millisecond) // a random moment, not a wait
		if !killAndReap(t, d, r, "during binds and deletes") {
			stuck++
		}
		stopLoad()
		cancel()
		wg.Wait()
		if r%2 == 1 {
			// Killed again while it restores at start: launched, not
			// waited for.
			stopLoad := cpuLoad(t, 2)
			d.launch()
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // a random moment
			if !killAndReap(t, d, r, "during its restore") {
				stuck++
			}
			stopLoad()
		}
		d.start()

		// What a restart must serve.
		mu.Lock()
		recs := make([]record, 0, len(records))
		for _, rec := range records {
			recs = append(recs, *rec)
		}
		mu.Unlock()
		vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for _, rec := range recs {
			info, err := c.Thread(vctx, "crash", rec.thread)
			switch {
			case rec.deleted:
				if !errors.Is(err, api.ErrNotFound) {
					t.Errorf("round %d: thread %s: delete was acknowledged, but it is back: %+v, %v", r, rec.thread, info, err)
				}
				continue
			case rec.deleteAsked && errors.Is(err, api.ErrNotFound):
				continue // the delete ran to its end, or was finished at start
			case err != nil:
				t.Errorf("round %d: thread %s: %v", r, rec.thread, err)
				lost++
				continue
			case info.State != "bound" && info.State != "closed":
				t.Errorf("round %d: thread %s is %q after a restart, want bound, closed or deleted", r, rec.thread, info.State)
			}
			got, err := c.Files().Read(vctx, "crash", rec.thread, api.ReadFileRequest{Path: "rec"})
			var out strings.Builder
			code, xerr := c.Exec(vctx, "crash", rec.thread, api.ExecRequest{Command: "cat /workspace/rec"}, &out, &out)
			var n strings.Builder
			ncode, nerr := c.Exec(vctx, "crash", rec.thread, api.ExecRequest{Command: "ls /workspace/bulk | wc -l"}, &n, &n)
			if nerr != nil || ncode != 0 || strings.TrimSpace(n.String()) != strconv.Itoa(bulkFiles) {
				t.Errorf("round %d: thread %s (delete asked: %v) is served with its workspace cut: %d of %d files (%q, exit %d, %v)",
					r, rec.thread, rec.deleteAsked, len(strings.Fields(n.String())), bulkFiles, n.String(), ncode, nerr)
			}
			if err != nil || got.Content != rec.value || xerr != nil || code != 0 || out.String() != rec.value {
				t.Errorf("round %d: thread %s: record lost: file API %q, %v; jail %q, exit %d, %v; want %q",
					r, rec.thread, got.Content, err, out.String(), code, xerr, rec.value)
				lost++
				continue
			}
			found++
		}
		vcancel()
		checkMountsAndFolders(t, d, c, r)
		if t.Failed() {
			break
		}
	}
	mu.Lock()
	for _, rec := range records {
		acked++
		switch {
		case rec.deleted:
			deletesAcked++
		case rec.deleteAsked:
			deletesCut++
		}
	}
	mu.Unlock()
	t.Logf("%d rounds of kill -9: %d records acknowledged (%d deleted by an acknowledged delete, %d by a delete cut short); "+
		"after each restart every live record was checked: %d checks found it, %d lost it; daemon not gone within 10 s of SIGKILL: %d",
		rounds, acked, deletesAcked, deletesCut, found, lost, stuck)
}

// checkMountsAndFolders checks the mount table and the data folder after a
// restart: one mount per path, each of a recorded thread, and no folder
// without a record.
func checkMountsAndFolders(t *testing.T, d *daemon, c *client.Client, r int) {
	t.Helper()
	infos, err := c.Threads(context.Background())
	if err != nil {
		t.Errorf("round %d: list threads: %v", r, err)
		return
	}
	recorded := map[string]bool{}
	for _, ti := range infos {
		recorded[ti.MountPath] = true
		recorded[ti.Root] = true
	}
	seen := map[string]bool{}
	for _, m := range testenv.MountsUnder(t, filepath.Join(d.data, "mnt")) {
		if seen[m] {
			t.Errorf("round %d: mounts stacked at %s", r, m)
		}
		seen[m] = true
		if !recorded[m] {
			t.Errorf("round %d: a mount at %s has no record", r, m)
		}
	}
	for _, base := range []string{filepath.Join(d.data, "mnt"), filepath.Join(d.data, "workspaces")} {
		tenants, _ := os.ReadDir(base)
		for _, tn := range tenants {
			if tn.Name() == ".homes" && base == filepath.Join(d.data, "workspaces") {
				// The threads' homes: each one a recorded thread's.
				homes := filepath.Join(base, ".homes")
				hts, _ := os.ReadDir(homes)
				for _, ht := range hts {
					ths, _ := os.ReadDir(filepath.Join(homes, ht.Name()))
					for _, th := range ths {
						if !recorded[filepath.Join(base, ht.Name(), th.Name())] {
							t.Errorf("round %d: home %s has no record", r, filepath.Join(homes, ht.Name(), th.Name()))
						}
					}
				}
				continue
			}
			ths, _ := os.ReadDir(filepath.Join(base, tn.Name()))
			for _, th := range ths {
				p := filepath.Join(base, tn.Name(), th.Name())
				if !recorded[p] {
					t.Errorf("round %d: folder %s has no record", r, p)
				}
			}
		}
	}
}

// killAndReap sends SIGKILL to the daemon and reports whether it was gone
// (reaped) within 10 s. If not, it fails the test, and frees the stuck
// process the way a restart would (aborting its mounts' connections), so
// that the test can end.
func killAndReap(t *testing.T, d *daemon, r int, when string) bool {
	t.Helper()
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return true
	}
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return true
	case <-time.After(10 * time.Second):
	}
	t.Errorf("round %d: warren serve (pid %d) killed %s is not gone after 10 s (state %s); its threads:\n%s",
		r, cmd.Process.Pid, when, procStateOf(cmd.Process.Pid), kernelStacks(cmd.Process.Pid))
	if _, err := fs.DetachUnder(d.data); err != nil {
		t.Logf("abort the stuck daemon's mounts: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("round %d: warren serve (pid %d) still not gone after its mounts' connections were aborted", r, cmd.Process.Pid)
	}
	return false
}

// kernelStacks describes where each thread of process pid waits in the
// kernel (its state, wait channel, system call and kernel stack), for a
// process that does not die.
func kernelStacks(pid int) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, task.Name())
		read := func(name string) string {
			data, err := os.ReadFile(dir + name)
			if err != nil {
				return err.Error()
			}
			return strings.TrimSpace(string(data))
		}
		state := "gone"
		if f := statFieldsAt(dir + "stat"); len(f) > 0 {
			state = f[0]
		}
		fmt.Fprintf(&b, "task %s (%s): state %s, wchan %s, syscall %s\n%s\n", task.Name(), read("comm"), state, read("wchan"), read("syscall"), read("stack"))
		if state == "D" {
			// What its descriptor table holds (a thread may have one of
			// its own, the poll hack's).
			fds, _ := os.ReadDir(dir + "fd")
			for _, fd := range fds {
				target, _ := os.Readlink(dir + "fd/" + fd.Name())
				fmt.Fprintf(&b, "  fd %s -> %s\n", fd.Name(), target)
			}
		}
	}
	return b.String()
}

// procStateOf is the state of process pid as /proc/PID/stat says it (R,
// S, D, Z...), or "gone".
func procStateOf(pid int) string {
	if f := statFields(pid); len(f) > 0 {
		return f[0]
	}
	return "gone"
}

// fsImmutableFl is FS_IMMUTABLE_FL (linux/fs.h), which x/sys does not name.
const fsImmutableFl = 0x10

// setImmutableFlag sets or clears FS_IMMUTABLE_FL on path.
func setImmutableFlag(t *testing.T, path string, on bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		testenv.CannotRun(t, "FS_IOC_GETFLAGS on %s: %v", path, err)
	}
	if on {
		flags |= fsImmutableFl
	} else {
		flags &^= fsImmutableFl
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		testenv.CannotRun(t, "FS_IOC_SETFLAGS on %s: %v", path, err)
	}
}

// TestDeleteCutShortIsNeverServed: a delete that stops half way (here a
// file it cannot remove; a kill -9 does the same) leaves the thread
// recorded as being deleted: it is never served again with its workspace
// half removed, not by a bind, a command or a restart (issue 12, item 5).
// A restart finishes the delete once it can.
func TestDeleteCutShortIsNeverServed(t *testing.T) {
	d := newDaemon(t)
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	ctx := context.Background()
	if _, err := c.Bind(ctx, "del", "t"); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code, err := c.Exec(ctx, "del", "t", api.ExecRequest{
		Command: "mkdir /workspace/a /workspace/z && cd /workspace/a && seq 50 | xargs touch && touch /workspace/z/keep",
	}, &out, &out); err != nil || code != 0 {
		t.Fatalf("fill the workspace: %d, %v: %s", code, err, out.String())
	}
	info, err := c.Thread(ctx, "del", "t")
	if err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(info.Root, "z", "keep")
	// A new file reaches the backing folder when the mount releases it,
	// which the kernel sends after the command ended: wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(keep); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear in the backing folder within 10 s", keep)
		}
	}
	setImmutableFlag(t, keep, true)
	t.Cleanup(func() {
		if _, err := os.Lstat(keep); err == nil {
			setImmutableFlag(t, keep, false) // else the temporary folder stays
		}
	})

	if err := c.DeleteThread(ctx, "del", "t"); err == nil {
		t.Fatal("delete of a workspace with an immutable file succeeded")
	}
	served := func(when string) {
		t.Helper()
		if info, err := c.Thread(ctx, "del", "t"); err != nil || info.State != "deleting" {
			t.Errorf("%s: thread is %q (%v), want deleting", when, info.State, err)
		}
		if _, err := c.Bind(ctx, "del", "t"); !errors.Is(err, api.ErrGone) {
			t.Errorf("%s: bind answered %v, want gone", when, err)
		}
		var ls strings.Builder
		code, err := c.Exec(ctx, "del", "t", api.ExecRequest{Command: "ls /workspace /workspace/a | wc -l"}, &ls, &ls)
		if !errors.Is(err, api.ErrGone) {
			t.Errorf("%s: a command in the half-deleted workspace answered exit %d, %v: %q; want gone", when, code, err, ls.String())
		}
	}
	served("after the failed delete")
	d.kill9()
	d.start()
	served("after a restart that could not finish the delete")

	setImmutableFlag(t, keep, false)
	d.kill9()
	d.start()
	if _, err := c.Thread(ctx, "del", "t"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("after a restart that could finish the delete: %v, want not found", err)
	}
	for _, p := range []string{info.Root, info.MountPath} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the delete finished: %v", p, err)
		}
	}
}
