package jail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// An image's root in a jail (image.go says what of an image a jail
// honours).
//
// The gateway clones the image's folder as a detached mount (cloneImage),
// read-only, nosuid, nodev and private, in its own namespace: the image
// store lives in the daemon's data folder, which a Base hides. The init
// attaches it in a staging tmpfs over its namespace's /tmp, checks the
// mount points the store made (ImageMountPoints: real folders and files,
// no link on the way), mounts the jail's own over them (the workspace,
// /tmp, /home/agent, /dev, /proc, and files it wrote in the staging tmpfs
// for /etc/passwd, /etc/group, /etc/hosts and /etc/resolv.conf, bound
// read-only), and pivots into it with pivot_root(".", "."), which needs no
// folder of its own in the read-only root. The staging tmpfs goes with
// the host's root; the files bound from it stay.
//
// What the image holds is not trusted: it may be anyone's. It is only
// ever read through descriptors that stay beneath its root (openat2 with
// RESOLVE_BENEATH or RESOLVE_IN_ROOT), mounted over only at paths with no
// link in them, and read at a bounded size.

// startTrees are the detached mounts Start hands the init, -1 for each
// it does not: the workspace (from a Base), the image's root and the home.
type startTrees struct{ ws, image, home int }

// close closes those still held.
func (t *startTrees) close() {
	for _, fd := range []*int{&t.ws, &t.image, &t.home} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// cloneFolder returns a detached bind of the host folder dir: the mount
// at dir alone, not the mounts under it, as MS_BIND without MS_REC makes
// it. dir's last element is not followed: a link put there would bind
// another folder.
func cloneFolder(what, dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("jail: open the %s %s (a folder, not a link): %w", what, dir, err)
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("jail: clone the %s %s: %w", what, dir, err)
	}
	return tree, nil
}

// cloneImage returns the image's root folder as a detached mount,
// read-only, nosuid and nodev from the start, and private: a clone of a
// shared mount joins its peer group, and the jail's mounts over the
// image's mount points would then appear in the image store's folder on
// the host.
func cloneImage(root string) (int, error) {
	tree, err := cloneFolder("image root", root)
	if err != nil {
		return -1, err
	}
	attr := unix.MountAttr{
		Attr_set:    unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Propagation: unix.MS_PRIVATE,
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("jail: make the image root %s read-only: %w", root, err)
	}
	return tree, nil
}

// cloneHome returns the home folder as a detached mount, private as the
// image's is; the init sets its flags as the workspace's (attachRW).
func cloneHome(dir string) (int, error) {
	tree, err := cloneFolder("home", dir)
	if err != nil {
		return -1, err
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Propagation: unix.MS_PRIVATE}); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("jail: make the home %s private: %w", dir, err)
	}
	return tree, nil
}

// maxResolvConf bounds the host's resolv.conf a jail on an image gets.
const maxResolvConf = 64 << 10

// hostResolvConf reads the host's /etc/resolv.conf for a jail on an
// image, as it is at the jail's start (a host root binds the host's /etc
// itself). A host without one gives "": the jail's is then empty.
func hostResolvConf() (string, error) {
	f, err := os.Open("/etc/resolv.conf")
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("jail: the host's resolv.conf: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResolvConf+1))
	if err != nil {
		return "", fmt.Errorf("jail: the host's resolv.conf: %w", err)
	}
	if len(b) > maxResolvConf {
		return "", fmt.Errorf("jail: the host's resolv.conf is over %d bytes", maxResolvConf)
	}
	return string(b), nil
}

// maxImageFile bounds a file of the image the init reads (/etc/passwd,
// /etc/group): an image is not trusted to keep them small.
const maxImageFile = 1 << 20

// stageImage attaches the image's root (tree) at root, in the staging
// tmpfs stage, checks its mount points, and binds the files the jail makes
// for it over theirs: /etc/passwd and /etc/group (the image's lines and
// the jail's user), /etc/hosts and /etc/resolv.conf. It returns the shell
// of the image.
func stageImage(s setup, tree int, stage, root string) (string, error) {
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("attach the image's root: %w", err)
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open the image's root: %w", err)
	}
	defer unix.Close(rootFd)
	if err := checkMountPoints(rootFd); err != nil {
		return "", err
	}
	shell := findShell(rootFd)
	userName, groupName := userNames(s.ImageUser)
	loginShell := shell
	if loginShell == "" {
		loginShell = shShell
	}
	passwd, err := readImageFile(rootFd, "/etc/passwd")
	if err != nil {
		return "", err
	}
	group, err := readImageFile(rootFd, "/etc/group")
	if err != nil {
		return "", err
	}
	resolv := s.ResolvConf
	if s.Nameserver != "" {
		resolv = nameserverResolvConf(s.Nameserver)
	}
	for _, f := range []struct {
		path string
		body []byte
	}{
		{"/etc/passwd", passwdFile(passwd, userName, s.UID, s.GID, loginShell)},
		{"/etc/group", groupFile(group, groupName, s.GID)},
		{"/etc/hosts", hostsFile(s.Hostname)},
		{"/etc/resolv.conf", []byte(resolv)},
	} {
		src := filepath.Join(stage, strings.ReplaceAll(strings.TrimPrefix(f.path, "/"), "/", "-"))
		if err := os.WriteFile(src, f.body, 0o644); err != nil {
			return "", fmt.Errorf("write the jail's %s: %w", f.path, err)
		}
		if err := bindFileReadOnly(src, filepath.Join(root, f.path)); err != nil {
			return "", fmt.Errorf("the jail's %s: %w", f.path, err)
		}
	}
	return shell, nil
}

// resolveBeneath opens the path rel of the image's root, with no link on
// the way, for mounting over or reading: a mount or a read through a link
// of the image could reach out of it.
func resolveBeneath(rootFd int, rel string, flags uint64) (int, error) {
	return unix.Openat2(rootFd, strings.TrimPrefix(rel, "/"), &unix.OpenHow{
		Flags:   flags | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
}

// checkMountPoints checks that the image's root holds every mount point
// of ImageMountPoints, of the right kind, with no link on the way. The
// image's root is read-only from its clone on and the store's folder is
// root's, so what is checked here stays so while the init mounts over
// the same paths.
func checkMountPoints(rootFd int) error {
	dirs, files := ImageMountPoints()
	for _, mp := range []struct {
		paths []string
		mode  uint32
		kind  string
	}{{dirs, unix.S_IFDIR, "a folder"}, {files, unix.S_IFREG, "a regular file"}} {
		for _, p := range mp.paths {
			fd, err := resolveBeneath(rootFd, p, unix.O_PATH)
			if err != nil {
				return fmt.Errorf("the image's mount point %s (%s, no link on the way): %w", p, mp.kind, err)
			}
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("the image's mount point %s: %w", p, err)
			}
			if st.Mode&unix.S_IFMT != mp.mode {
				return fmt.Errorf("the image's mount point %s is not %s", p, mp.kind)
			}
		}
	}
	return nil
}

// findShell returns the shell for command lines in the root rootFd
// opens: /bin/bash if it has one the jail's user may run, else /bin/sh,
// else "". Links are followed inside the root, as the jail's exec will
// (/bin is often a link to usr/bin).
func findShell(rootFd int) string {
	for _, sh := range []string{bashShell, shShell} {
		fd, err := unix.Openat2(rootFd, strings.TrimPrefix(sh, "/"), &unix.OpenHow{
			Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			continue
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return sh
		}
	}
	return ""
}

// readImageFile reads the image's file at rel (a mount point: a regular
// file with no link on the way), at most maxImageFile bytes.
func readImageFile(rootFd int, rel string) ([]byte, error) {
	fd, err := resolveBeneath(rootFd, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("open the image's %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, fmt.Errorf("read the image's %s: %w", rel, err)
	}
	if len(b) > maxImageFile {
		return nil, fmt.Errorf("the image's %s is over %d bytes", rel, maxImageFile)
	}
	return b, nil
}

// passwdFile is the jail's /etc/passwd: the image's lines, but those of
// the jail's user's name or uid (a name or a uid that meant two users
// would have getpwnam and getpwuid disagree: the image's nobody would
// own the jail's processes, with its home /nonexistent), and the jail's
// user, at home in /home/agent.
func passwdFile(image []byte, name string, uid, gid uint32, shell string) []byte {
	id := strconv.FormatUint(uint64(uid), 10)
	out := keepLines(image, func(f []string) bool { return len(f) > 2 && (f[0] == name || f[2] == id) })
	fmt.Fprintf(out, "%s:x:%d:%d::%s:%s\n", name, uid, gid, Home, shell)
	return out.Bytes()
}

// groupFile is the jail's /etc/group: the image's lines, but those of the
// jail's group's name or gid, and the jail's group.
func groupFile(image []byte, name string, gid uint32) []byte {
	id := strconv.FormatUint(uint64(gid), 10)
	out := keepLines(image, func(f []string) bool { return len(f) > 2 && (f[0] == name || f[2] == id) })
	fmt.Fprintf(out, "%s:x:%d:\n", name, gid)
	return out.Bytes()
}

// keepLines returns the lines of a colon-separated file but those whose
// fields drop says to, ending with a newline.
func keepLines(b []byte, drop func(fields []string) bool) *bytes.Buffer {
	var out bytes.Buffer
	for line := range strings.Lines(string(b)) {
		if drop(strings.Split(strings.TrimRight(line, "\n"), ":")) {
			continue
		}
		out.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			out.WriteByte('\n')
		}
	}
	return &out
}

// hostsFile is the jail's /etc/hosts: localhost, and the jail's host name
// on a loopback address of its own, as Debian's installer writes it (the
// jail's loopback answers the whole of 127/8).
func hostsFile(hostname string) []byte {
	b := []byte("# warren: this jail's hosts\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	if isHostname(hostname) {
		b = fmt.Appendf(b, "127.0.1.1\t%s\n", hostname)
	}
	return b
}

// isHostname says whether s is a host name /etc/hosts can hold as it is:
// letters, digits, - and ., at most 64 bytes (sethostname's bound).
func isHostname(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// bindFileReadOnly binds the file src over dst (a path with no link on
// the way), read-only, nosuid, nodev and noexec.
func bindFileReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("remount read-only: %w", err)
	}
	return nil
}

// pivotInPlace makes root (a mount point) the calling process's root
// without a folder for the old one: pivot_root(".", ".") stacks the old
// root on the new, and the detach of "." takes it off again
// (pivot_root(2)), with the staging tmpfs and every host mount under it.
func pivotInPlace(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("enter the new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return unix.Chdir("/")
}
