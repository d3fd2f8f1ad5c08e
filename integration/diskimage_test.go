package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/diskimage"
	"warren/internal/testenv"
)

// waitNoLoopDevice waits until no loop device is attached to a file
// below dir: the kernel frees an AUTOCLEAR device once its last mount
// goes.
func waitNoLoopDevice(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		devs := testenv.LoopDevicesUnder(t, dir)
		if len(devs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop devices %v of the image still attached 10 s after the daemon stopped", devs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDiskImageDefault: a daemon on its default --disk-image, over a data
// folder on a filesystem without quotas (an ext4 of the test's own), gets
// its workspaces and snapshots on a btrfs image; one thread that fills
// its disk gets EDQUOT while another thread binds, writes, checkpoints
// (into the snapshots on the image) and closes;
// after kill -9 the next start adopts the image's mounts and serves
// everything again; after a clean stop no mount and no loop device of
// the image is left.
func TestDiskImageDefault(t *testing.T) {
	testenv.RequireCommand(t, "mkfs.btrfs")
	mnt := testenv.LoopFS(t, 768<<20, "mkfs.ext4", []string{"-q"}, "")
	data := filepath.Join(mnt, "data")
	d := newDaemonAt(t, data, "--disk-image="+diskimage.ModeAuto) // the default, which the harness turns off
	for _, dir := range []string{"workspaces", "snapshots"} {
		var st unix.Statfs_t
		must(t, unix.Statfs(filepath.Join(data, dir), &st))
		if st.Type != unix.BTRFS_SUPER_MAGIC {
			t.Fatalf("%s is on filesystem type %#x, not on the btrfs image", dir, st.Type)
		}
	}
	if !strings.Contains(d.allLogs(), "disk protected") {
		t.Errorf("the start log does not say the disk is protected:\n%s", d.allLogs())
	}
	if devs := testenv.LoopDevicesUnder(t, mnt); len(devs) != 1 {
		t.Fatalf("loop devices of the image: %v; want one", devs)
	}

	d.bind("default", "hog")
	b := d.bind("default", "other")
	code, out := d.execIn("hog", "dd if=/dev/zero of=/workspace/fill bs=1M; sync")
	if !strings.Contains(out, "Disk quota exceeded") && !strings.Contains(out, "No space left") {
		t.Fatalf("dd until the disk refuses: exit %d: %s; want EDQUOT or ENOSPC", code, out)
	}
	t.Logf("the filling thread: %s", out)
	// The other thread writes (through its mount and in its jail), a
	// new thread binds, and the other thread closes.
	must(t, os.WriteFile(filepath.Join(b, "after.txt"), make([]byte, 1<<20), 0o644))
	if code, out := d.execIn("other", "dd if=/dev/zero of=/workspace/dd bs=1M count=8 && sync"); code != 0 {
		t.Fatalf("another thread's dd of 8 MiB after one filled its disk: exit %d: %s", code, out)
	}
	d.bind("default", "new")
	d.mustWarren("checkpoint", "--thread", "other")
	d.mustWarren("close", "--thread", "other")

	// kill -9: the image stays mounted; the next start adopts it.
	d.kill9()
	d.start()
	if !strings.Contains(d.allLogs(), "adopted") {
		t.Errorf("the start after kill -9 does not say it adopted the image's mounts:\n%s", d.allLogs())
	}
	b = d.bind("default", "other")
	if st, err := os.Stat(filepath.Join(b, "after.txt")); err != nil || st.Size() != 1<<20 {
		t.Fatalf("the other thread's file after kill -9 and a restart: %v", err)
	}
	if code, out := d.execIn("hog", "rm /workspace/fill && echo ok"); code != 0 {
		t.Fatalf("the filling thread after the restart: exit %d: %s", code, out)
	}
	if devs := testenv.LoopDevicesUnder(t, mnt); len(devs) != 1 {
		t.Fatalf("loop devices of the image after kill -9 and a restart: %v; want one", devs)
	}

	d.stop()
	for _, dir := range []string{"workspaces", "snapshots"} {
		if ms := testenv.MountsUnder(t, filepath.Join(data, dir)); len(ms) != 0 {
			t.Errorf("mounts left after a clean stop: %v", ms)
		}
	}
	waitNoLoopDevice(t, mnt)
}

// TestDiskUnprotected: where the daemon cannot use an image (no loop
// devices here, as the test's $WARREN_LOOP_CONTROL says; a data folder
// whose workspaces are on the host's filesystem from before), it serves
// on the host's filesystem, and the start log and warren doctor say
// "disk unprotected" and why.
func TestDiskUnprotected(t *testing.T) {
	testenv.RequireCommand(t, "mkfs.btrfs")
	mnt := testenv.LoopFS(t, 768<<20, "mkfs.ext4", []string{"-q"}, "")
	data := filepath.Join(mnt, "data")
	t.Setenv(diskimage.LoopControlEnv, filepath.Join(mnt, "no-loop-control"))
	d := newDaemonAt(t, data, "--disk-image=auto")
	if logs := d.allLogs(); !strings.Contains(logs, "disk unprotected") || !strings.Contains(logs, "no loop devices") {
		t.Errorf("the start log without loop devices does not say disk unprotected, and why:\n%s", logs)
	}
	a := d.bind("default", "a")
	must(t, os.WriteFile(filepath.Join(a, "kept.txt"), []byte("kept"), 0o644))
	var st unix.Statfs_t
	must(t, unix.Statfs(filepath.Join(data, "workspaces"), &st))
	if st.Type == unix.BTRFS_SUPER_MAGIC {
		t.Fatal("the workspaces are on btrfs without loop devices")
	}
	doctor := func(want string) {
		t.Helper()
		out, _ := exec.Command(warrenBin, "doctor", "--data", data).CombinedOutput()
		if !strings.Contains(string(out), "disk unprotected") || !strings.Contains(string(out), want) {
			t.Errorf("warren doctor does not say disk unprotected because %q:\n%s", want, out)
		}
	}
	doctor("no loop devices")

	// With loop devices, the workspaces of the earlier start stay where
	// they are, served, and the image is not made over them.
	d.stop()
	os.Unsetenv(diskimage.LoopControlEnv)
	d.start()
	if logs := d.allLogs(); !strings.Contains(logs, "earlier start") {
		t.Errorf("the start log over workspaces from before does not say why the disk is unprotected:\n%s", logs)
	}
	if got, err := os.ReadFile(filepath.Join(d.bind("default", "a"), "kept.txt")); err != nil || string(got) != "kept" {
		t.Fatalf("a thread of the earlier start: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(data, diskimage.ImageName)); !os.IsNotExist(err) {
		t.Errorf("an image was made for a data folder with workspaces: %v", err)
	}
	doctor("earlier start")
}
