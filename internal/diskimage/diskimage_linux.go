// Package diskimage gives a daemon's workspaces and snapshots a btrfs
// filesystem of their own, in an image file of the data folder, so that
// the threads' disk is bounded where the host's filesystem cannot enforce
// quotas (ext4, XFS without project quotas, tmpfs): the image is
// preallocated (fallocate) at a size that leaves a reserve of the host's
// filesystem free, and inside it btrfs quota groups (package diskquota)
// bound each thread and all of them together. docs/operations.md, "The
// disk image", says what it does and when.
//
// The image DATA/disk.img is attached to a loop device with
// LO_FLAGS_AUTOCLEAR and mounted twice: its subvolume "workspaces" at
// DATA/workspaces and "snapshots" at DATA/snapshots, the folders the
// daemon uses without an image, so nothing else changes. The mounts are
// in the host's mount namespace (the daemon's FUSE mounts are, and their
// backing folders must be reachable by path): a killed daemon leaves
// them, and the loop device, mounted; the next start adopts them. A clean
// stop unmounts them, and the kernel then frees the loop device.
package diskimage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"warren/internal/diskquota"
	"warren/internal/mountinfo"
)

// Modes of --disk-image.
const (
	// ModeAuto uses an image where the workspaces' filesystem cannot
	// enforce quotas and the workspaces are the data folder's own, and
	// says "disk unprotected" and why where it cannot.
	ModeAuto = "auto"
	// ModeOn is ModeAuto that refuses to start where no image can be
	// used.
	ModeOn = "on"
	// ModeOff uses no image (benchmarks, tests that are not about it).
	ModeOff = "off"
)

const (
	// ImageName is the image's file name in the data folder.
	ImageName = "disk.img"
	// MinBytes is the smallest image: below it btrfs and a few threads
	// have no room.
	MinBytes = 256 << 20
	// minHostReserve is the least of the host's filesystem a default
	// image leaves free: the metadata store (48 MiB on a full disk),
	// logs, the rest of the machine.
	minHostReserve = 256 << 20
	// DefaultLoopControl is the loop devices' control device.
	DefaultLoopControl = "/dev/loop-control"
	// LoopControlEnv, if set, names another control device: a test sets
	// a missing one to see the daemon without loop devices.
	LoopControlEnv = "WARREN_LOOP_CONTROL"

	setupName = ".disk-image.setup"
	// mountOptions: nodiscard, because btrfs turns discard=async on by
	// default where the device supports it, and a loop device does by
	// punching holes in the image, which would give the preallocated
	// space back to the host.
	mountOptions = "nodiscard"
	// iocResize is BTRFS_IOC_RESIZE, _IOW(0x94, 3, btrfs_ioctl_vol_args).
	iocResize = 0x50009403
)

// Options are what decides whether and how the image is used.
type Options struct {
	DataDir string // absolute
	Mode    string // ModeAuto, ModeOn or ModeOff ("" is ModeAuto)
	// SizeBytes is the image's size; 0 is the default: what leaves
	// HostReserveBytes of the host's filesystem free, at its making.
	// An existing image smaller than SizeBytes grows to it at start.
	SizeBytes int64
	// HostReserveBytes is what a default image leaves free on the host's
	// filesystem; 0 is a tenth of it, at least 256 MiB.
	HostReserveBytes int64
	// Workspaces and Snapshots are the --workspaces and --snapshots
	// flags: "" is the data folder's own folder.
	Workspaces, Snapshots string
	// LoopControl is the loop control device; "" is DefaultLoopControl.
	LoopControl string
}

// Plan is what Decide found.
type Plan struct {
	// Use says the workspaces (and snapshots) go on the image.
	Use bool
	// Image is the image file's path.
	Image string
	// Exists says the image file is there already.
	Exists bool
	// Size is the size the image has after Open: a new one's, or a grown
	// one's; for an existing one not grown, its size.
	Size int64
	// Native says the workspaces' filesystem enforces quotas itself
	// (btrfs): no image is needed, and --disk-reserve protects the disk.
	Native bool
	// Reason says why no image is used (Use false), for "disk
	// unprotected" (unless Native).
	Reason string
}

// Targets are the folders the image is mounted at, with their
// subvolumes: the workspaces, and the snapshots unless --snapshots moves
// them elsewhere.
func (o Options) targets() [][2]string {
	t := [][2]string{{filepath.Join(o.DataDir, "workspaces"), "workspaces"}}
	if o.Snapshots == "" {
		t = append(t, [2]string{filepath.Join(o.DataDir, "snapshots"), "snapshots"})
	}
	return t
}

// Decide says whether the image is used, without changing anything. In
// ModeOn every reason not to is an error; in any mode, an image that a
// start without it would hide (its workspaces) is one.
func Decide(o Options) (Plan, error) {
	p := Plan{Image: filepath.Join(o.DataDir, ImageName)}
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	if o.Mode != ModeAuto && o.Mode != ModeOn && o.Mode != ModeOff {
		return p, fmt.Errorf("--disk-image is auto, on or off, not %q", o.Mode)
	}
	st, err := os.Stat(p.Image)
	switch {
	case err == nil:
		p.Exists, p.Size = true, st.Size()
	case !errors.Is(err, os.ErrNotExist):
		return p, fmt.Errorf("disk image: %w", err)
	}
	if p.Exists {
		if o.Mode == ModeOff {
			return p, fmt.Errorf("disk image: the data folder's workspaces are in its disk image %s; --disk-image off would serve an empty folder instead: start with --disk-image auto, or remove the image (and its threads)", p.Image)
		}
		if o.Workspaces != "" {
			return p, fmt.Errorf("disk image: the data folder's workspaces are in its disk image %s, but --workspaces %s puts them elsewhere", p.Image, o.Workspaces)
		}
		p.Use = true
		if o.SizeBytes > p.Size {
			need := o.SizeBytes - p.Size
			if free, _, err := hostSpace(o.DataDir); err != nil {
				return p, err
			} else if need > free-hostReserve(o) {
				return p, fmt.Errorf("disk image: growing %s from %d to %d bytes needs %d MiB, but the host's filesystem has %d MiB free above its reserve of %d MiB",
					p.Image, p.Size, o.SizeBytes, need>>20, max(free-hostReserve(o), 0)>>20, hostReserve(o)>>20)
			}
			p.Size = o.SizeBytes
		}
		if err := loopUsable(o); err != nil {
			return p, fmt.Errorf("disk image: the data folder's workspaces are in its disk image %s, which needs a loop device: %w", p.Image, err)
		}
		return p, nil
	}
	no := func(reason string) (Plan, error) {
		p.Reason = reason
		if o.Mode == ModeOn {
			return p, fmt.Errorf("--disk-image on: %s", reason)
		}
		return p, nil
	}
	if o.Mode == ModeOff {
		p.Reason = "--disk-image off"
		return p, nil
	}
	if o.Workspaces != "" {
		return no(fmt.Sprintf("--workspaces %s is not the data folder's own (servers may share it): it cannot go on a disk image of this daemon", o.Workspaces))
	}
	ws := filepath.Join(o.DataDir, "workspaces")
	if btrfs, err := diskquota.IsBtrfs(nearest(ws)); err == nil && btrfs {
		p.Native = true
		return no(fmt.Sprintf("the workspaces' filesystem (%s) is btrfs, which enforces quotas itself: --disk-reserve protects it", nearest(ws)))
	}
	if err := loopUsable(o); err != nil {
		return no(err.Error())
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		return no("mkfs.btrfs is not installed (btrfs-progs)")
	}
	// Last of the reasons, so that a daemon without loop devices says
	// that, not that its own workspaces are there.
	for _, t := range o.targets() {
		if n, err := entries(t[0]); err != nil {
			return p, fmt.Errorf("disk image: %w", err)
		} else if n > 0 {
			return no(fmt.Sprintf("%s holds data of an earlier start on the host's filesystem; an image is made only for a new data folder (move the data folder's threads to a new one to get it)", t[0]))
		}
	}
	free, _, err := hostSpace(o.DataDir)
	if err != nil {
		return p, err
	}
	size := o.SizeBytes
	if size == 0 {
		size = (free - hostReserve(o)) &^ (1<<20 - 1)
		if size < MinBytes {
			return no(fmt.Sprintf("the data folder's filesystem has %d MiB free; a disk image of at least %d MiB that leaves %d MiB free does not fit",
				free>>20, MinBytes>>20, hostReserve(o)>>20))
		}
	} else if size < MinBytes {
		return p, fmt.Errorf("--disk-image-size is at least %d MiB, not %d bytes", MinBytes>>20, size)
	} else if size > free-hostReserve(o) {
		return p, fmt.Errorf("--disk-image-size %d MiB: the data folder's filesystem has %d MiB free, and %d MiB of it stay free", size>>20, free>>20, hostReserve(o)>>20)
	}
	p.Use, p.Size = true, size
	return p, nil
}

// loopUsable says why loop devices cannot be used, or nil.
func loopUsable(o Options) error {
	f, err := os.OpenFile(loopControl(o), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	return f.Close()
}

func loopControl(o Options) string {
	if o.LoopControl != "" {
		return o.LoopControl
	}
	return DefaultLoopControl
}

func hostReserve(o Options) int64 {
	if o.HostReserveBytes > 0 {
		return o.HostReserveBytes
	}
	_, total, err := hostSpace(o.DataDir)
	if err != nil {
		return minHostReserve
	}
	return max(total/10, minHostReserve)
}

// hostSpace is the free and total bytes of dir's filesystem (its nearest
// existing folder's).
func hostSpace(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	d := nearest(dir)
	if err := unix.Statfs(d, &st); err != nil {
		return 0, 0, fmt.Errorf("disk image: statfs %s: %w", d, err)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// nearest is dir or its nearest existing parent.
func nearest(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// entries counts the entries of dir (0 if it does not exist).
func entries(dir string) (int, error) {
	es, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return len(es), err
}

// Logger is the part of hclog.Logger the image logs with; the package
// does not link hclog, as warren doctor (the CLI) links it.
type Logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

// Image is the mounted image of a running daemon.
type Image struct {
	log    Logger
	path   string
	dev    string
	mounts []string
}

// Open makes the image if plan says it does not exist, and mounts it at
// the targets, or adopts the mounts a killed daemon left. It grows the
// image to plan.Size if that is more.
func Open(log Logger, o Options, plan Plan) (_ *Image, err error) {
	im := &Image{log: log, path: plan.Image}
	defer func() {
		if err != nil {
			im.Close()
		}
	}()
	// A start killed while it made the subvolumes leaves the image's top
	// level mounted there: that mount goes first, so that the image is
	// attached once.
	setup := filepath.Join(o.DataDir, setupName)
	if m, err := mountsOf([][2]string{{setup, ""}}); err != nil {
		return nil, err
	} else if _, ok := m[setup]; ok {
		if err := unix.Unmount(setup, unix.MNT_DETACH); err != nil {
			return nil, fmt.Errorf("disk image: unmount %s, left by a former start: %w", setup, err)
		}
		log.Info("disk image: unmounted what a former start left", "path", setup)
	}
	mounted, err := mountsOf(o.targets())
	if err != nil {
		return nil, err
	}
	for _, t := range o.targets() {
		m, ok := mounted[t[0]]
		if !ok {
			continue
		}
		if err := im.adopt(m); err != nil {
			return nil, fmt.Errorf("disk image: %s is mounted already: %w", t[0], err)
		}
		im.mounts = append(im.mounts, t[0])
		log.Info("disk image: adopted the mount a former run left", "path", t[0], "device", m.source)
	}
	if !plan.Exists {
		if err := create(plan.Image, plan.Size); err != nil {
			return nil, err
		}
		log.Info("disk image made", "image", plan.Image, "bytes", plan.Size)
	}
	var loop *os.File
	if im.dev == "" {
		if loop, err = attach(loopControl(o), plan.Image); err != nil {
			return nil, err
		}
		// The mounts hold the device; this descriptor only until they
		// are made, then AUTOCLEAR frees it when they go.
		defer loop.Close()
		im.dev = loop.Name()
		if err := subvolumes(im.dev, setup, o.targets()); err != nil {
			return nil, err
		}
	}
	for _, t := range o.targets() {
		if _, ok := mounted[t[0]]; ok {
			continue
		}
		if err := os.MkdirAll(t[0], 0o700); err != nil {
			return nil, fmt.Errorf("disk image: %w", err)
		}
		// Never hide what is there.
		if n, err := entries(t[0]); err != nil || n > 0 {
			return nil, fmt.Errorf("disk image: %s is not empty (%d entries, %v); mounting the image there would hide them", t[0], n, err)
		}
		if err := unix.Mount(im.dev, t[0], "btrfs", unix.MS_NOSUID|unix.MS_NODEV, "subvol="+t[1]+","+mountOptions); err != nil {
			return nil, fmt.Errorf("disk image: mount %s (subvolume %s of %s) at %s: %w", im.dev, t[1], plan.Image, t[0], err)
		}
		im.mounts = append(im.mounts, t[0])
	}
	if err := im.grow(plan.Size); err != nil {
		return nil, err
	}
	log.Info("disk image mounted", "image", plan.Image, "device", im.dev, "bytes", plan.Size, "mounts", strings.Join(im.mounts, ","))
	return im, nil
}

// adopt checks that the mount m is of this image, and takes its device.
func (im *Image) adopt(m mount) error {
	if m.fstype != "btrfs" {
		return fmt.Errorf("a %s filesystem from %s, not the image %s", m.fstype, m.source, im.path)
	}
	back, err := BackingFile(m.source)
	if err != nil {
		return fmt.Errorf("from %s, not the image %s: %w", m.source, im.path, err)
	}
	if !sameFile(back, im.path) {
		return fmt.Errorf("from %s backed by %s, not the image %s", m.source, back, im.path)
	}
	if im.dev != "" && im.dev != m.source {
		return fmt.Errorf("from %s, but another mount of the image is from %s", m.source, im.dev)
	}
	im.dev = m.source
	return nil
}

// Device is the loop device the image is attached to.
func (im *Image) Device() string { return im.dev }

// Close unmounts the image; the kernel then frees its loop device. A
// mount still busy is detached lazily: the device is freed when the last
// user lets go.
func (im *Image) Close() error {
	var errs []error
	for i := len(im.mounts) - 1; i >= 0; i-- {
		p := im.mounts[i]
		err := unix.Unmount(p, 0)
		if errors.Is(err, unix.EBUSY) {
			im.log.Warn("disk image: busy at stop; detached lazily, its loop device goes when the last user does", "path", p)
			err = unix.Unmount(p, unix.MNT_DETACH)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("disk image: unmount %s: %w", p, err))
		}
	}
	im.mounts = nil
	return errors.Join(errs...)
}

// create makes the image file: preallocated, so that the host's other
// users cannot take its space, and formatted. It is made under another
// name and renamed, so that a start killed halfway leaves no image.
func create(path string, size int64) error {
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk image: preallocate %d bytes for %s: %w", size, path, err)
	}
	// -K: no discard, which would punch the preallocation out.
	if out, err := exec.Command("mkfs.btrfs", "-q", "-K", "-f", tmp).CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk image: mkfs.btrfs %s: %w: %s", tmp, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk image: %w", err)
	}
	return nil
}

// attach attaches the image to a free loop device, with AUTOCLEAR, and
// returns the device open.
func attach(control, image string) (*os.File, error) {
	ctl, err := os.OpenFile(control, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("disk image: no loop devices: %w", err)
	}
	defer ctl.Close()
	back, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	defer back.Close()
	// Another program may take the free device between the two calls:
	// its LOOP_CONFIGURE then fails with EBUSY, and the next one is
	// tried.
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("disk image: find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("disk image: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("disk image: attach %s to %s: %w", image, dev.Name(), err)
		}
	}
	return nil, fmt.Errorf("disk image: attach %s: every free loop device was taken", image)
}

// subvolumes makes the targets' subvolumes in the filesystem on dev that
// are not there yet, through a mount of its top level at dir.
func subvolumes(dev, dir string, targets [][2]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount(dev, dir, "btrfs", unix.MS_NOSUID|unix.MS_NODEV, "subvolid=5,"+mountOptions); err != nil {
		return fmt.Errorf("disk image: mount %s at %s: %w", dev, dir, err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	for _, t := range targets {
		if err := diskquota.MakeSubvolume(filepath.Join(dir, t[1])); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("disk image: %w", err)
		}
	}
	return nil
}

// grow makes the image size bytes if it is smaller: more preallocated,
// the loop device told, btrfs resized to the device.
func (im *Image) grow(size int64) error {
	st, err := os.Stat(im.path)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if size <= st.Size() || len(im.mounts) == 0 {
		return nil
	}
	f, err := os.OpenFile(im.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	f.Close()
	if err != nil {
		return fmt.Errorf("disk image: grow %s to %d bytes: %w", im.path, size, err)
	}
	dev, err := os.OpenFile(im.dev, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	_, err = unix.IoctlRetInt(int(dev.Fd()), unix.LOOP_SET_CAPACITY)
	dev.Close()
	if err != nil {
		return fmt.Errorf("disk image: tell %s its new size: %w", im.dev, err)
	}
	mnt, err := os.Open(im.mounts[0])
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer mnt.Close()
	var args struct {
		fd   int64
		name [4088]byte
	}
	copy(args.name[:], "1:max")
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, mnt.Fd(), iocResize, uintptr(unsafe.Pointer(&args))); errno != 0 {
		return fmt.Errorf("disk image: resize the filesystem of %s: %w", im.path, errno)
	}
	im.log.Info("disk image grown", "image", im.path, "from", st.Size(), "to", size)
	return nil
}

// BackingFile is the file a loop device such as /dev/loop3 is attached
// to, from /sys/block/loop3/loop/backing_file.
func BackingFile(dev string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return "", fmt.Errorf("not a loop device in use: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// mount is a line of /proc/self/mountinfo.
type mount struct {
	source, fstype string
}

// mountsOf returns the mounts at the targets' paths (the topmost of
// each), from /proc/self/mountinfo.
func mountsOf(targets [][2]string) (map[string]mount, error) {
	want := map[string]bool{}
	for _, t := range targets {
		want[t[0]] = true
	}
	found := map[string]mount{}
	if err := mountinfo.Scan("/proc/self/mountinfo", func(e mountinfo.Entry) bool {
		if want[e.Path] {
			found[e.Path] = mount{source: e.Source, fstype: e.FSType}
		}
		return true
	}); err != nil {
		return nil, fmt.Errorf("disk image: read mountinfo: %w", err)
	}
	return found, nil
}
