package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/internal/testenv"
)

// daemonFds counts the daemon's open descriptors, all and those of files
// below under, and lists those below under whose file was deleted.
func daemonFds(t *testing.T, pid int, under string) (all, below int, deleted []string) {
	t.Helper()
	targets := fdTargets(t, pid)
	for _, target := range targets {
		if strings.HasPrefix(target, under+"/") {
			below++
			if strings.HasSuffix(target, " (deleted)") {
				deleted = append(deleted, target)
			}
		}
	}
	return len(targets), below, deleted
}

// TestDescriptorBudgetOfTheDaemon runs the daemon with an open-file limit
// of 4096 and has one thread's jail make 20,000 empty files, which a host
// du and find then walk through the thread's mount and an inspection
// mount. The daemon must keep its node
// descriptors within their budget (2048 of the 4096), so another thread's
// exec and a new bind still work; and after the thread is closed and
// deleted, it must hold no descriptor of its files (their disk space is
// given back) and be back to the descriptors it had before.
func TestDescriptorBudgetOfTheDaemon(t *testing.T) {
	testenv.RequireCommand(t, "prlimit")
	const limit, budget, files = 4096, 2048, 20000
	d := newDaemonThrough(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"})
	pid := d.pid()
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	must(t, err)
	if want := fmt.Sprintf("Max open files            %d                 %d", limit, limit); !strings.Contains(string(limits), want) {
		t.Fatalf("the daemon's open-file limit is not %d:\n%s", limit, limits)
	}
	workspaces := filepath.Join(d.data, "workspaces")

	heavy := d.bind("default", "heavy")
	d.bind("default", "other")
	for _, thread := range []string{"heavy", "other"} {
		if code, out := d.execIn(thread, "echo ok"); code != 0 || strings.TrimSpace(out) != "ok" {
			t.Fatalf("exec in thread %s at start: %d %q", thread, code, out)
		}
	}
	// With both jails running: each mount's own root descriptors are
	// counted here, not in the budget.
	base, baseNodes, _ := daemonFds(t, pid, workspaces)
	t.Logf("daemon descriptors at start: %d, %d of them of workspace files", base, baseNodes)

	// ": > f" is one CREATE and a close: nothing uses the new node after.
	code, out := d.execIn("heavy", fmt.Sprintf(`mkdir many && cd many && i=0 && while [ $i -lt %d ]; do : > f$i; i=$((i+1)); done && ls | wc -l`, files))
	if code != 0 || strings.TrimSpace(out) != fmt.Sprint(files) {
		t.Errorf("making %d files in the jail: exit %d, %.300q", files, code, out)
	}
	// The host walks the tree through the thread's mount path, and
	// through an inspection mount, whose nodes are all new lookups.
	look := filepath.Join(t.TempDir(), "look")
	must(t, os.Mkdir(look, 0o755))
	tops := []string{heavy}
	if _, err := d.warren("mount", "--thread", "heavy", look); err != nil {
		t.Errorf("an inspection mount after the files: %v", err)
	} else {
		t.Cleanup(func() { d.warren("umount", look) })
		tops = append(tops, look)
	}
	for _, top := range tops {
		if out, err := exec.Command("du", "-s", top).CombinedOutput(); err != nil {
			t.Errorf("du -s %s: %v: %.300s", top, err, out)
		}
		if out, err := exec.Command("find", top, "-type", "f").Output(); err != nil || strings.Count(string(out), "\n") != files {
			t.Errorf("find %s: %v, %d files", top, err, strings.Count(string(out), "\n"))
		}
	}
	all, nodes, _ := daemonFds(t, pid, workspaces)
	t.Logf("daemon descriptors after %d files: %d, %d of them of workspace files", files, all, nodes)
	// A mount holds three descriptors of its root of its own, outside
	// the budget: the inspection mount's are not in baseNodes.
	const rootFds = 3
	if nodes-baseNodes > budget+rootFds {
		t.Errorf("the daemon holds %d more descriptors of workspace files than at start, budget %d + %d", nodes-baseNodes, budget, rootFds)
	}
	// Besides the nodes', a few more of the daemon's own may be open
	// now: pidfds of the processes that made requests (until the next
	// sweep), a job's cgroup file.
	if all > base+budget+rootFds+16 {
		t.Errorf("the daemon holds %d descriptors, %d at start + budget %d + %d + 16", all, base, budget, rootFds)
	}

	if code, out := d.execIn("other", "echo ok"); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("exec in the other thread after the files: %d %q", code, out)
	}
	if out, err := d.warren("bind", "--thread", "third"); err != nil {
		t.Errorf("bind after the files: %v", err)
	} else {
		must(t, os.WriteFile(filepath.Join(strings.TrimSpace(out), "x"), []byte("x"), 0o644))
	}

	if len(tops) > 1 {
		d.mustWarren("umount", look)
	}

	// Close and delete: every descriptor of the thread's files goes.
	var b struct{ Root string }
	must(t, json.Unmarshal([]byte(d.mustWarren("bind", "--thread", "heavy", "--json")), &b))
	d.mustWarren("close", "--thread", "heavy")
	d.mustWarren("delete", "--thread", "heavy")
	if _, err := os.Stat(b.Root); !os.IsNotExist(err) {
		t.Fatalf("delete left the folder: %v", err)
	}
	all, _, deleted := daemonFds(t, pid, b.Root)
	t.Logf("daemon descriptors after close and delete: %d", all)
	if len(deleted) > 0 {
		t.Errorf("the daemon still holds %d descriptors of deleted files, e.g. %s", len(deleted), deleted[0])
	}
	// The third thread's mount and some connections being torn down may
	// still be there; 20,000 are not.
	if all > base+64 {
		t.Errorf("the daemon holds %d descriptors after close and delete, %d at start", all, base)
	}
}

// holdOpen is a job that opens the files many/f0... until it has 3000 or
// an open fails, says how many it got and why it stopped, and keeps them.
const holdOpen = `import os, time
fs, err = [], ""
for i in range(3000):
    try:
        fs.append(open("/workspace/many/f%d" % i))
    except OSError as e:
        err = e.strerror
        break
n = len(fs)
if fs:
    fs.pop().close()  # room to write the report
with open("/workspace/opened.tmp", "w") as f:
    f.write("%d %s" % (n, err))
os.rename("/workspace/opened.tmp", "/workspace/opened")
time.sleep(600)
`

// TestOpenFilesOfOneThread: a job holding thousands of files open in one
// thread's mount (each one a descriptor of the daemon too) gets ENFILE
// past the daemon's cap, 1024 of a 4096 limit, and the daemon keeps its
// own reserve: another thread's exec and a new bind still work.
func TestOpenFilesOfOneThread(t *testing.T) {
	testenv.RequireCommand(t, "prlimit")
	testenv.RequireCommand(t, "python3")
	const limit, maxFiles = 4096, 1024
	d := newDaemonThrough(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"})
	pid := d.pid()
	hog := d.bind("default", "hog")
	d.bind("default", "other")
	if code, out := d.execIn("other", "echo ok"); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Fatalf("exec in the other thread at start: %d %q", code, out)
	}
	must(t, os.Mkdir(filepath.Join(hog, "many"), 0o755))
	for i := range 3000 {
		must(t, os.WriteFile(filepath.Join(hog, "many", fmt.Sprintf("f%d", i)), nil, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(hog, "hold.py"), []byte(holdOpen), 0o644))
	if code, out := d.execIn("hog", "ulimit -n"); code != 0 || strings.TrimSpace(out) != fmt.Sprint(limit) {
		t.Fatalf("a jail process may open %q files, want %d: the test would show nothing", out, limit)
	}
	job := strings.TrimSpace(d.mustWarren("spawn", "--thread", "hog", "--", "python3 /workspace/hold.py"))
	t.Cleanup(func() { d.warren("kill", "--thread", "hog", job) })
	var report []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if report, err = os.ReadFile(filepath.Join(hog, "opened")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			out, _ := d.warren("logs", "--thread", "hog", job)
			t.Fatalf("the job did not report within 60s: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	all, _, _ := daemonFds(t, pid, filepath.Join(d.data, "workspaces"))
	t.Logf("the job: %s; the daemon holds %d descriptors", report, all)
	var opened int
	var why string
	fmt.Sscanf(string(report), "%d", &opened)
	_, why, _ = strings.Cut(string(report), " ")
	if opened > maxFiles || why != "Too many open files in system" {
		t.Errorf("the job opened %d files and stopped with %q; want at most %d, then ENFILE", opened, why, maxFiles)
	}
	if code, out := d.execIn("other", "echo ok"); code != 0 || strings.TrimSpace(out) != "ok" {
		t.Errorf("exec in the other thread while the job holds its files: %d %q", code, out)
	}
	if out, err := d.warren("bind", "--thread", "third"); err != nil {
		t.Errorf("bind while the job holds its files: %v", err)
	} else {
		must(t, os.WriteFile(filepath.Join(strings.TrimSpace(out), "x"), []byte("x"), 0o644))
	}
}
