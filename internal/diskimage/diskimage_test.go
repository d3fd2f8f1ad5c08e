package diskimage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// hostFS is a quota-less ext4 filesystem of the test's own, with a data
// folder path on it.
func hostFS(t *testing.T, size int64) (mnt, data string) {
	t.Helper()
	testenv.RequireCommand(t, "mkfs.btrfs")
	mnt = testenv.LoopFS(t, size, "mkfs.ext4", []string{"-q"}, "")
	data = filepath.Join(mnt, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt, data
}

func statfs(t *testing.T, dir string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitNoDevice waits until no loop device is attached to a file below
// dir (the kernel frees an AUTOCLEAR device when its last user goes).
func waitNoDevice(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		devs := testenv.LoopDevicesUnder(t, dir)
		if len(devs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop devices %v still attached to the image 10 s after its last unmount", devs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestImage: on a filesystem without quotas, a new data folder gets its
// workspaces and snapshots on a btrfs image, preallocated on the host so
// that the host's free space goes down by its size at once; a second Open
// without a Close (as after kill -9) adopts the mounts; a larger size
// grows it at the next start; Close leaves no mount and no loop device.
func TestImage(t *testing.T) {
	mnt, data := hostFS(t, 1<<30)
	log := hclog.NewNullLogger()
	o := Options{DataDir: data}
	p, err := Decide(o)
	if err != nil || !p.Use || p.Exists {
		t.Fatalf("Decide on a new data folder on ext4: %+v, %v; want a new image", p, err)
	}
	hostTotal := int64(statfs(t, mnt).Blocks) * statfs(t, mnt).Bsize
	freeBefore := int64(statfs(t, mnt).Bavail) * statfs(t, mnt).Bsize
	if want := freeBefore - max(hostTotal/10, minHostReserve); p.Size > want || p.Size < want-(1<<20) {
		t.Errorf("image of %d bytes; want what leaves the reserve free: %d", p.Size, want)
	}
	im, err := Open(log, o, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	if freeAfter := int64(statfs(t, mnt).Bavail) * statfs(t, mnt).Bsize; freeBefore-freeAfter < p.Size {
		t.Errorf("the host's free space went from %d to %d: the image of %d bytes is not preallocated", freeBefore, freeAfter, p.Size)
	}
	for _, dir := range []string{"workspaces", "snapshots"} {
		if st := statfs(t, filepath.Join(data, dir)); st.Type != unix.BTRFS_SUPER_MAGIC {
			t.Errorf("%s is on filesystem type %#x, not btrfs", dir, st.Type)
		}
	}
	devs := testenv.LoopDevicesUnder(t, mnt)
	if len(devs) != 1 || devs[0] != im.Device() {
		t.Fatalf("loop devices of the image: %v; want just %s", devs, im.Device())
	}
	if err := os.WriteFile(filepath.Join(data, "workspaces", "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A start after kill -9: the mounts are there, the image is adopted,
	// and grown to a larger size asked (which a smaller host reserve
	// leaves room for).
	o.SizeBytes, o.HostReserveBytes = p.Size+64<<20, 128<<20
	p2, err := Decide(o)
	if err != nil || !p2.Use || !p2.Exists || p2.Size != o.SizeBytes {
		t.Fatalf("Decide with the image mounted: %+v, %v", p2, err)
	}
	im2, err := Open(log, o, p2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im2.Close() })
	if im2.Device() != im.Device() {
		t.Errorf("a second start attached %s; want the adopted %s", im2.Device(), im.Device())
	}
	if _, err := os.Stat(filepath.Join(data, "workspaces", "kept")); err != nil {
		t.Errorf("a file of the first run after adoption: %v", err)
	}
	if n := len(testenv.MountsUnder(t, data)); n != 2 {
		t.Errorf("%d mounts under the data folder after adoption; want 2", n)
	}
	if size := int64(statfs(t, filepath.Join(data, "workspaces")).Blocks) * statfs(t, filepath.Join(data, "workspaces")).Bsize; size <= p.Size {
		t.Errorf("the image's filesystem has %d bytes after growing to %d; want more than %d", size, o.SizeBytes, p.Size)
	}

	if err := im2.Close(); err != nil {
		t.Fatal(err)
	}
	if ms := testenv.MountsUnder(t, data); len(ms) != 0 {
		t.Errorf("mounts left after Close: %v", ms)
	}
	waitNoDevice(t, mnt)

	// A start after a clean stop attaches it again: the data is there.
	o.SizeBytes, o.HostReserveBytes = 0, 0
	p3, err := Decide(o)
	if err != nil || !p3.Use || !p3.Exists {
		t.Fatalf("Decide with the image unmounted: %+v, %v", p3, err)
	}
	im3, err := Open(log, o, p3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "workspaces", "kept")); err != nil {
		t.Errorf("a file of the first run after a clean stop: %v", err)
	}
	if err := im3.Close(); err != nil {
		t.Fatal(err)
	}
	waitNoDevice(t, mnt)

	// Off would hide the image's workspaces: refused.
	if _, err := Decide(Options{DataDir: data, Mode: ModeOff}); err == nil || !strings.Contains(err.Error(), "would serve an empty folder") {
		t.Errorf("Decide off with an image: %v; want a refusal", err)
	}
}

// TestDecideUnprotected: where no image can be used, auto says why (and
// on refuses), and nothing is made.
func TestDecideUnprotected(t *testing.T) {
	_, data := hostFS(t, 512<<20)
	cases := []struct {
		name  string
		o     Options
		setup func()
		why   string
	}{
		{"no loop devices", Options{LoopControl: filepath.Join(data, "no-loop-control")}, nil, "no loop devices"},
		{"shared workspaces", Options{Workspaces: "/srv/shared"}, nil, "not the data folder's own"},
		{"off", Options{Mode: ModeOff}, nil, "--disk-image off"},
		{"too small", Options{HostReserveBytes: 400 << 20}, nil, "does not fit"},
		{"workspaces from before", Options{}, func() {
			os.MkdirAll(filepath.Join(data, "workspaces", "tenant"), 0o700)
		}, "earlier start"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			c.o.DataDir = data
			p, err := Decide(c.o)
			if err != nil || p.Use || !strings.Contains(p.Reason, c.why) {
				t.Errorf("auto: %+v, %v; want no image because %q", p, err, c.why)
			}
			if c.o.Mode == ModeOff {
				return
			}
			c.o.Mode = ModeOn
			if _, err := Decide(c.o); err == nil || !strings.Contains(err.Error(), c.why) {
				t.Errorf("on: %v; want a refusal because %q", err, c.why)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(data, ImageName)); !os.IsNotExist(err) {
		t.Errorf("an image was made: %v", err)
	}
}
