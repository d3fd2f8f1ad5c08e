package fs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
)

// This file mounts onto a descriptor (Options.Target) instead of a path.
// The filesystem is made detached with the new mount API (fsopen, fsconfig,
// fsmount: no path is named), served, and only then moved onto the target
// descriptor (move_mount with empty paths). Afterwards the mount is known by
// the descriptor fsmount returned, never by a path: Close detaches it
// through /proc/self/fd/N, which the kernel resolves to that very mount
// wherever it was moved since. So no path string is walked between the
// caller's checks and the mount, and no symlink swapped into a parent
// folder can redirect the mount or its unmount.

// Target is a folder to mount onto, named by a descriptor.
type Target struct {
	// Fd is an O_PATH descriptor of the folder, resolved and checked by the
	// caller without following links. Serve does not close it.
	Fd int
}

// serveAt serves the node tree on a mount made detached (fsmount) and then
// moved onto the target's folder, or, without a target, onto the folder at
// *mountpoint (opened without following links). It returns the server and
// the mount's own descriptor (fsmount's), by which Close finds the mount.
// With a target, *mountpoint is set to /proc/self/fd/N of that descriptor
// once the mount is in place: every later use of the path in Serve (an
// undo) then reaches this mount, wherever it is, and nothing else.
//
// The daemon never makes a request to a mount it serves (see doc.go,
// "Requests to its own mounts"): a thread blocked on one cannot end while
// the process dies, the dying daemon keeps every descriptor, its mounts
// hang and its store stays locked. So nothing here opens or stats a file
// of the new mount, but for the poll hack, made on a thread that cannot
// hold the connection open (pollhack_linux.go); go-fuse's WaitMount (its
// own poll hack opens .go-fuse-epoll-hack on the mount from the serving
// process as it is) is never called, since go-fuse serves
// a /dev/fuse descriptor it is handed as "/dev/fd/N" and reads INIT before
// NewServer returns; the flags are checked in the mount table, not by
// statfs (which asks the filesystem). The /dev/fuse descriptor is
// close-on-exec (go-fuse's own mount(2) leaves it inheritable, so every
// jail started after would hold the connection open past the daemon).
func serveAt(root fusefs.InodeEmbedder, mountpoint *string, target *Target, opts *fusefs.Options, transport Transport, noPollHack bool, log hclog.Logger) (served, int, error) {
	targetFd := -1
	if target != nil {
		targetFd = target.Fd
	} else {
		fd, err := unix.Open(*mountpoint, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return served{}, -1, fmt.Errorf("open mount point: %w", err)
		}
		defer unix.Close(fd)
		targetFd = fd
	}
	flags := opts.MountOptions.DirectMountFlags
	fuseFd, mntFd, err := mountDetached(&opts.MountOptions, flags)
	if err != nil {
		return served{}, -1, err
	}
	// go-fuse serves a /dev/fuse descriptor it is handed as "/dev/fd/N"
	// and mounts nothing itself then.
	o := *opts
	o.MountOptions.DirectMount, o.MountOptions.DirectMountStrict = false, false
	server, err := serveNodes(root, fuseFd, &o, transport, log)
	if err != nil {
		// Dropping the last reference to a detached mount dissolves it.
		unix.Close(mntFd)
		if server.Server != nil {
			server.Serve() // the connection is gone: it closes fuseFd
		} else {
			unix.Close(fuseFd)
		}
		return served{}, -1, fmt.Errorf("serve the detached mount: %w", err)
	}
	undo := func() {
		// Out of the tree if it was moved there; the last reference then
		// goes, the mount dissolves and the serve loop ends.
		unix.Unmount(procFdPath(mntFd), unix.MNT_DETACH)
		unix.Close(mntFd)
		server.Wait()
	}
	if server.transport == TransportURing && noPollHack {
		// See Options.NoPollHack.
	} else if err := pollHack(mntFd); err != nil {
		undo()
		return served{}, -1, err
	}
	if err := moveOnto(mntFd, targetFd); err != nil {
		undo()
		return served{}, -1, err
	}
	if err := checkAttrs(mntFd, flags); err != nil {
		undo()
		return served{}, -1, err
	}
	if target != nil {
		*mountpoint = procFdPath(mntFd)
	}
	return server, mntFd, nil
}

// checkAttrs checks, in the mount table, that the kernel set the per-mount
// flags (read-only, nosuid, nodev, nosymfollow...) as asked: a flag
// silently dropped would open a hole (nosymfollow is what keeps a host
// process from following an agent's link out of the workspace, hostview.go).
// It reads /proc/self/mountinfo for the mount of mntFd, which asks the
// filesystem nothing; statfs would send it a request.
func checkAttrs(mntFd int, flags uintptr) error {
	if attrs, ok, err := mountFlagsOf(mntFd); err != nil {
		return err
	} else if ok {
		want, err := mountAttrs(flags)
		if err != nil {
			return err
		}
		// MOUNT_ATTR_RDONLY and the rest are bits of the same mask.
		if missing := uint64(want) &^ attrs; missing != 0 {
			return fmt.Errorf("the mount lacks the flags %#x it was made with (it has %#x)", missing, attrs)
		}
		return nil
	}
	id, _, err := MountID(mntFd)
	if err != nil {
		return err
	}
	e, ok, err := LookupMount(id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the mount %d is not in the mount table", id)
	}
	have := make(map[string]bool)
	for _, o := range strings.Split(e.Options, ",") {
		have[o] = true
	}
	for _, f := range []struct {
		ms   uintptr
		name string
	}{
		{unix.MS_RDONLY, "ro"},
		{unix.MS_NOSUID, "nosuid"},
		{unix.MS_NODEV, "nodev"},
		{unix.MS_NOEXEC, "noexec"},
		{unix.MS_NOSYMFOLLOW, "nosymfollow"},
	} {
		if flags&f.ms != 0 && !have[f.name] {
			return fmt.Errorf("the mount is not %s (mount options %q)", f.name, e.Options)
		}
	}
	return nil
}

// mountAttrs turns MS_ flags of mount(2) into the MOUNT_ATTR_ flags of
// fsmount(2). Flags that have no attribute are refused, so a flag added to
// Serve's mounts is never silently dropped from the moved ones.
func mountAttrs(flags uintptr) (int, error) {
	attrs := 0
	for _, f := range []struct {
		ms   uintptr
		attr int
	}{
		{unix.MS_RDONLY, unix.MOUNT_ATTR_RDONLY},
		{unix.MS_NOSUID, unix.MOUNT_ATTR_NOSUID},
		{unix.MS_NODEV, unix.MOUNT_ATTR_NODEV},
		{unix.MS_NOEXEC, unix.MOUNT_ATTR_NOEXEC},
		{unix.MS_NOATIME, unix.MOUNT_ATTR_NOATIME},
		{unix.MS_NODIRATIME, unix.MOUNT_ATTR_NODIRATIME},
		{unix.MS_NOSYMFOLLOW, unix.MOUNT_ATTR_NOSYMFOLLOW},
	} {
		if flags&f.ms != 0 {
			attrs |= f.attr
			flags &^= f.ms
		}
	}
	if flags != 0 {
		return 0, fmt.Errorf("mount flags %#x have no fsmount attribute", flags)
	}
	return attrs, nil
}

// mountDetached makes a FUSE filesystem as mo and flags describe, as a
// mount attached nowhere. It returns the /dev/fuse descriptor to serve it
// on and the mount's descriptor (fsmount's).
func mountDetached(mo *fuse.MountOptions, flags uintptr) (fuseFd, mntFd int, err error) {
	attrs, err := mountAttrs(flags)
	if err != nil {
		return -1, -1, err
	}
	fuseFd, err = unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open /dev/fuse: %w", err)
	}
	fsFd, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		unix.Close(fuseFd)
		return -1, -1, fmt.Errorf("fsopen fuse: %w", err)
	}
	defer unix.Close(fsFd)
	params := [][2]string{
		{"source", fitSource(mo.FsName)},
		{"subtype", mo.Name},
		{"fd", strconv.Itoa(fuseFd)},
		{"rootmode", strconv.FormatUint(unix.S_IFDIR, 8)},
		{"user_id", strconv.Itoa(os.Geteuid())},
		{"group_id", strconv.Itoa(os.Getegid())},
		{"max_read", strconv.Itoa(mo.MaxWrite)},
	}
	for _, p := range params {
		if err := unix.FsconfigSetString(fsFd, p[0], p[1]); err != nil {
			unix.Close(fuseFd)
			return -1, -1, fmt.Errorf("fsconfig %s=%s: %w", p[0], p[1], err)
		}
	}
	var opts []string
	if mo.AllowOther {
		opts = append(opts, "allow_other")
	}
	opts = append(opts, mo.Options...)
	if flags&unix.MS_RDONLY != 0 {
		// The superblock too, as mount(2) with MS_RDONLY makes it.
		opts = append(opts, "ro")
	}
	for _, o := range opts {
		if err := unix.FsconfigSetFlag(fsFd, o); err != nil {
			unix.Close(fuseFd)
			return -1, -1, fmt.Errorf("fsconfig %s: %w", o, err)
		}
	}
	// The kernel sends INIT here; the server reads it first.
	if err := unix.FsconfigCreate(fsFd); err != nil {
		unix.Close(fuseFd)
		return -1, -1, fmt.Errorf("fsconfig create: %w", err)
	}
	mntFd, err = unix.Fsmount(fsFd, unix.FSMOUNT_CLOEXEC, attrs)
	if err != nil {
		unix.Close(fuseFd)
		return -1, -1, fmt.Errorf("fsmount: %w", err)
	}
	return fuseFd, mntFd, nil
}

// moveOnto attaches the detached mount mntFd onto the folder targetFd.
func moveOnto(mntFd, targetFd int) error {
	if err := unix.MoveMount(mntFd, "", targetFd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount onto the target: %w", err)
	}
	return nil
}

// MountID returns the id of the mount fd is on (as in
// /proc/self/mountinfo) and whether fd is that mount's root. It asks the
// filesystem nothing (AT_STATX_DONT_SYNC), so a dead FUSE mount answers too.
func MountID(fd int) (id uint64, root bool, err error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, false, fmt.Errorf("fs: statx: %w", err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 || stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		// Fail closed: without them nothing can be told about fd's mount.
		return 0, false, errors.New("fs: statx: the kernel reports no mount id or mount root")
	}
	return stx.Mnt_id, stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// MountEntry is one line of /proc/self/mountinfo.
type MountEntry = mountinfo.Entry

// LookupMount returns the entry of mount id in this process's mount
// namespace, and false if no mount of that id is attached there.
func LookupMount(id uint64) (e MountEntry, found bool, err error) {
	err = scanMountTable(func(m MountEntry) bool {
		if m.ID == id {
			e, found = m, true
		}
		return !found
	})
	return e, found, err
}

// DetachFd lazily unmounts the mount whose root fd is: the mount itself,
// through /proc/self/fd/N, wherever it is. A mount that is not attached
// any more (EINVAL) is not an error. It returns an error unless the mount
// is gone from the mount table afterwards.
func DetachFd(fd int) error {
	id, root, err := MountID(fd)
	if err != nil {
		return err
	}
	if !root {
		return errors.New("fs: detach: the descriptor is not the root of a mount")
	}
	// The magic link is followed to the descriptor's own (mount, root); no
	// mount stacked on top of it is looked up (LAST_BIND).
	unique, uerr := uniqueMountID(fd)
	if err := unix.Unmount(procFdPath(fd), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("fs: detach mount %d: %w", id, err)
	}
	if uerr == nil {
		if attached, ok, err := mountAttached(unique); err != nil {
			return err
		} else if ok && attached {
			return fmt.Errorf("fs: detach mount %d: still attached", id)
		} else if ok {
			return nil
		}
	}
	if e, attached, err := LookupMount(id); err != nil {
		return err
	} else if attached {
		return fmt.Errorf("fs: detach mount %d: still attached at %s", id, e.Path)
	}
	return nil
}

// scanMountTable calls visit with each entry of /proc/self/mountinfo, in
// table order, until visit returns false. It asks no filesystem anything.
func scanMountTable(visit func(MountEntry) bool) error {
	if err := mountinfo.Scan("/proc/self/mountinfo", visit); err != nil {
		return fmt.Errorf("fs: read mount table: %w", err)
	}
	return nil
}

// maxSource bounds the source (the name in the mount table): fsconfig
// takes strings of at most 256 bytes, with the NUL.
const maxSource = 255

// fitSource shortens a source longer than fsconfig takes to a prefix and a
// hash of the whole, so that two long names stay apart in the table.
func fitSource(s string) string {
	if len(s) <= maxSource {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:8])
	return s[:maxSource-len(h)-1] + "~" + h
}
