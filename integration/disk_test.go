package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// alive fails the test if the daemon has exited.
func (d *daemon) alive() {
	d.t.Helper()
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	select {
	case <-done:
		d.t.Fatalf("warren serve died:\n%s", d.allLogs())
	default:
	}
}

// TestStoreSurvivesFullDisk fills the disk of the daemon's metadata store
// (a small ext4 of the test's own) as root, which takes ext4's root
// reserve too. The daemon must stay up and answer: reads work, writes to
// the store are refused with a clear "no space" error (Badger's memtable
// is an mmap'd file; a write to it on a full disk is a SIGBUS), also after
// a restart on the full disk; once space is back, writes work again.
func TestStoreSurvivesFullDisk(t *testing.T) {
	mnt := testenv.LoopFS(t, 96<<20, "mkfs.ext4", []string{"-q"}, "")
	d := newDaemonAt(t, filepath.Join(mnt, "data"))
	a := d.bind("default", "a")
	must(t, os.WriteFile(filepath.Join(a, "kept.txt"), []byte("kept"), 0o644))

	filler := testenv.FillDisk(t, mnt)
	for i := range 20 {
		// A new thread (a folder, then a record) and new settings of a
		// bound one (a record only).
		_, err := d.warren("bind", "--thread", fmt.Sprintf("b%d", i))
		if err == nil || !strings.Contains(err.Error(), "no space") {
			t.Fatalf("bind b%d on a full disk: %v; want an error that says no space", i, err)
		}
		_, err = d.warren("bind", "--thread", "a", "--max-jobs", fmt.Sprint(i%4+2))
		if err == nil || !strings.Contains(err.Error(), "no space") {
			t.Fatalf("new settings of a on a full disk: %v; want an error that says no space", err)
		}
		d.alive()
	}
	if out := d.mustWarren("ls"); !strings.Contains(out, "a ") {
		t.Fatalf("ls on a full disk: %q lacks thread a", out)
	}

	// A restart on the full disk: the daemon starts, serves what it had,
	// and refuses writes the same way.
	d.stop()
	d.start()
	if out := d.mustWarren("ls"); !strings.Contains(out, "a ") {
		t.Fatalf("ls after a restart on a full disk: %q lacks thread a", out)
	}
	if got, err := os.ReadFile(filepath.Join(a, "kept.txt")); err != nil || string(got) != "kept" {
		t.Fatalf("read kept.txt after a restart on a full disk: %q, %v", got, err)
	}
	if _, err := d.warren("bind", "--thread", "c"); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("bind after a restart on a full disk: %v; want an error that says no space", err)
	}
	if _, err := d.warren("bind", "--thread", "a", "--max-jobs", "7"); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("new settings of a after a restart on a full disk: %v; want an error that says no space", err)
	}
	d.alive()

	// Space is back: writes work again, without a restart.
	must(t, os.Remove(filler))
	syscall.Sync()
	d.mustWarren("bind", "--thread", "a", "--max-jobs", "7")
	c := d.bind("default", "c")
	must(t, os.WriteFile(filepath.Join(c, "new.txt"), []byte("new"), 0o644))
	d.alive()
}

// daemonIO is the bytes the daemon process read and wrote through system
// calls (rchar + wchar of /proc/PID/io): a write the daemon serves passes
// through both, a passthrough write through neither.
func (d *daemon) daemonIO() int64 {
	d.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", d.pid()))
	if err != nil {
		d.t.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ": ")
		if name == "rchar" || name == "wchar" {
			var n int64
			fmt.Sscan(v, &n)
			total += n
		}
	}
	return total
}

// fileSize is the size of a file in a thread's workspace, read through its
// mount.
func fileSize(t *testing.T, mount, name string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(mount, name))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestDiskQuota: on a btrfs of the test's own, a thread's workspace holds
// at most its quota (the daemon's default, or its own setting): dd and
// fallocate in its jail get EDQUOT, for writes the kernel passes through
// to the backing file (the daemon moves none of the bytes) as well; a
// thread with a bigger quota still writes, and a new quota applies at
// once.
func TestDiskQuota(t *testing.T) {
	const quota = 16 << 20
	mnt := testenv.LoopFS(t, 512<<20, "mkfs.btrfs", []string{"-q"}, "")
	d := newDaemonAt(t, filepath.Join(mnt, "data"), "--disk-quota", fmt.Sprint(quota))
	small := d.bind("default", "small")
	big := strings.TrimSpace(d.mustWarren("bind", "--thread", "big", "--disk", fmt.Sprint(64<<20)))
	// A workspace made as a plain folder (by an older warren) cannot be
	// bounded: its bind is refused, not served without a quota.
	must(t, os.MkdirAll(filepath.Join(mnt, "data", "workspaces", "default", "plain"), 0o755))
	if _, err := d.warren("bind", "--thread", "plain"); err == nil || !strings.Contains(err.Error(), "plain folder") {
		t.Fatalf("bind of a plain-folder workspace with a default quota: %v; want a refusal", err)
	}

	before := d.daemonIO()
	code, out := d.execIn("small", "dd if=/dev/zero of=/workspace/dd bs=1M count=32")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd of 32 MiB with a quota of 16 MiB: exit %d: %s; want EDQUOT", code, out)
	}
	if n := fileSize(t, small, "dd"); n > quota {
		t.Fatalf("dd wrote %d bytes with a quota of %d", n, quota)
	}
	moved := d.daemonIO() - before
	t.Logf("the daemon read and wrote %d bytes while dd wrote up to %d", moved, quota)
	if moved > 4<<20 {
		t.Fatalf("the daemon read and wrote %d bytes during dd: the writes did not pass through, so passthrough was not checked", moved)
	}
	// At its quota, a thread can still free space.
	if code, out := d.execIn("small", "rm /workspace/dd"); code != 0 {
		t.Fatalf("rm at the quota: exit %d: %s", code, out)
	}
	code, out = d.execIn("small", "fallocate -l 32M /workspace/fa")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("fallocate of 32 MiB with a quota of 16 MiB: exit %d: %s; want EDQUOT", code, out)
	}

	// Another thread, with a quota of its own, writes on.
	code, out = d.execIn("big", "dd if=/dev/zero of=/workspace/dd bs=1M count=32 && fallocate -l 16M /workspace/fa")
	if code != 0 {
		t.Fatalf("dd and fallocate of 48 MiB with a quota of 64 MiB: exit %d: %s", code, out)
	}
	if n := fileSize(t, big, "dd"); n != 32<<20 {
		t.Fatalf("big's dd wrote %d bytes, want %d", n, 32<<20)
	}

	// A new quota holds at once, for the running jail too.
	d.mustWarren("bind", "--thread", "small", "--disk", fmt.Sprint(64<<20))
	code, out = d.execIn("small", "rm -f /workspace/fa; dd if=/dev/zero of=/workspace/dd bs=1M count=32")
	if code != 0 {
		t.Fatalf("dd of 32 MiB after the quota became 64 MiB: exit %d: %s", code, out)
	}

	// A deleted thread's workspace (a subvolume) goes like a folder.
	d.mustWarren("delete", "--thread", "small")
	root := filepath.Join(mnt, "data", "workspaces", "default", "small")
	if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("workspace of a deleted thread: %v; want it gone", err)
	}

	// A restart with a new default quota gives it to the threads it
	// mounts again.
	d.bind("default", "later")
	if code, out := d.execIn("later", "dd if=/dev/zero of=/workspace/dd bs=1M count=32"); code == 0 {
		t.Fatalf("dd of 32 MiB with the default quota of 16 MiB succeeded: %s", out)
	}
	d.stop()
	d.args = []string{"--disk-quota", fmt.Sprint(64 << 20)}
	d.start()
	if code, out := d.execIn("later", "dd if=/dev/zero of=/workspace/dd bs=1M count=32"); code != 0 {
		t.Fatalf("dd of 32 MiB after a restart with a default quota of 64 MiB: exit %d: %s", code, out)
	}
}

// TestDiskQuotaUnenforceable: a quota on workspaces whose filesystem cannot
// enforce one (ext4 here) is an error, at start for the daemon's default
// and at bind for a thread's setting, never a silent no-op.
func TestDiskQuotaUnenforceable(t *testing.T) {
	mnt := testenv.LoopFS(t, 160<<20, "mkfs.ext4", []string{"-q"}, "")
	out, err := exec.Command(warrenBin, "serve", "--data", filepath.Join(mnt, "refused"), "--disk-image", "off", "--disk-quota", fmt.Sprint(16<<20)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot enforce disk quotas") {
		t.Fatalf("serve --disk-quota on ext4: %v: %s; want a refusal that says the filesystem cannot enforce it", err, out)
	}
	d := newDaemonAt(t, filepath.Join(mnt, "data"))
	d.bind("default", "plain")
	_, err = d.warren("bind", "--thread", "q", "--disk", fmt.Sprint(16<<20))
	if err == nil || !strings.Contains(err.Error(), "cannot enforce") {
		t.Fatalf("bind --disk on ext4: %v; want a refusal that says it cannot be enforced", err)
	}
	if _, err := d.warren("bind", "--thread", "plain", "--disk", fmt.Sprint(16<<20)); err == nil {
		t.Fatal("a quota for a bound thread on ext4 was accepted")
	}
}

// TestDiskReserve: threads without a quota that fill the disk stop with
// EDQUOT while the reserve is still free; the metadata store and other
// threads' binds go on working, also after a restart.
func TestDiskReserve(t *testing.T) {
	const reserve = 128 << 20
	mnt := testenv.LoopFS(t, 512<<20, "mkfs.btrfs", []string{"-q"}, "")
	d := newDaemonAt(t, filepath.Join(mnt, "data"), "--disk-reserve", fmt.Sprint(reserve))
	d.bind("default", "a")
	d.bind("default", "b")
	code, out := d.execIn("a", "dd if=/dev/zero of=/workspace/fill bs=1M; sync")
	if !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd until the disk refuses: exit %d: %s; want EDQUOT at the reserve", code, out)
	}
	code, out = d.execIn("b", "dd if=/dev/zero of=/workspace/fill bs=1M count=16")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("another thread's dd of 16 MiB past the reserve: exit %d: %s; want EDQUOT", code, out)
	}
	var st unix.Statfs_t
	must(t, unix.Statfs(mnt, &st))
	free := int64(st.Bavail) * st.Bsize
	t.Logf("workspaces stopped with %d bytes free, reserve %d", free, reserve)
	if free < reserve/2 {
		t.Fatalf("workspaces stopped with %d bytes free; want about the reserve, %d", free, reserve)
	}
	// The store writes, and a new thread binds; its workspace is under
	// the reserve like every other.
	d.mustWarren("bind", "--thread", "a", "--max-jobs", "3")
	c := d.bind("default", "c")
	if err := os.WriteFile(filepath.Join(c, "small.txt"), make([]byte, 1<<20), 0o644); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("a new thread's write past the reserve: %v; want EDQUOT", err)
	}
	d.stop()
	d.start()
	d.bind("default", "d")
	d.alive()
}

// TestDiskLimitsRemoved: removing --disk-reserve or --disk-quota takes the
// limit away at the next start. A reserve the disk's state made a byte
// (the reserve is past what the disk has free) stops every write; a
// restart without the flag lifts it, so the threads it mounts again write
// past the old limits, and a new thread binds and writes.
func TestDiskLimitsRemoved(t *testing.T) {
	mnt := testenv.LoopFS(t, 512<<20, "mkfs.btrfs", []string{"-q"}, "")
	data := filepath.Join(mnt, "data")
	d := newDaemonAt(t, data, "--disk-quota", fmt.Sprint(16<<20), "--disk-reserve", fmt.Sprint(320<<20))
	d.bind("default", "a")
	code, out := d.execIn("a", "dd if=/dev/zero of=/workspace/fill bs=1M count=32")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Fatalf("dd of 32 MiB with a quota of 16 MiB: exit %d: %s; want EDQUOT", code, out)
	}

	// A reserve past the disk's size: all workspaces together are
	// limited to a byte.
	d.stop()
	d.args = []string{"--disk-reserve", fmt.Sprint(1 << 40)}
	d.start()
	if code, out := d.execIn("a", "dd if=/dev/zero of=/workspace/more bs=1M count=1"); code == 0 {
		t.Fatalf("dd with the workspaces limited to a byte succeeded: %s", out)
	}

	// No flags: neither limit is left.
	d.stop()
	d.args = nil
	d.start()
	code, out = d.execIn("a", "rm -f /workspace/more; dd if=/dev/zero of=/workspace/fill bs=1M count=200 && sync")
	if code != 0 {
		t.Fatalf("dd of 200 MiB after a restart without --disk-quota and --disk-reserve: exit %d: %s", code, out)
	}
	b := d.bind("default", "b")
	if err := os.WriteFile(filepath.Join(b, "new.bin"), make([]byte, 64<<20), 0o644); err != nil {
		t.Fatalf("a new thread's write of 64 MiB after the limits were removed: %v", err)
	}
	d.alive()
}
