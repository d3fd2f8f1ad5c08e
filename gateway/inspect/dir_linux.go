package inspect

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
)

// This file resolves and checks the folder of an inspection mount on
// descriptors. A client names the folder by a path, and an allowed uid may
// change the folders along it at will; so the path is walked once, one
// component at a time without following any link, every check is made on
// the descriptors of that walk, and the mount is made onto the final
// descriptor (fs.Options.Target). Nothing walks the path string again
// between the checks and the mount.

// fileID is a folder's identity: device and inode.
type fileID struct{ dev, ino uint64 }

func fileIDOf(fd int) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// statID returns the identity of the folder at path (resolved, as the
// daemon's own configured folders are).
func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// walkNoLinks opens the absolute, clean path as an O_PATH descriptor of a
// folder, one component at a time from "/", refusing any symlink on the
// way (RESOLVE_NO_SYMLINKS: the kernel refuses, nothing is checked then
// used). Mounts on the way are entered, as a path lookup would, but for
// FUSE mounts, which are refused (notThroughFUSE). visit, if
// not nil, sees every folder of the walk, "/" and the last included. The
// caller closes the descriptor.
func walkNoLinks(path string, visit func(fd int, at string) error) (int, error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return -1, fmt.Errorf("%w: %s is not an absolute, clean path", api.ErrInvalid, call.Quote(path))
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	at := "/"
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for _, name := range strings.Split(path, "/") {
		if name == "" {
			continue
		}
		if visit != nil {
			if err := visit(fd, at); err != nil {
				unix.Close(fd)
				return -1, err
			}
		}
		at = filepath.Join(at, name)
		var next int
		for {
			next, err = unix.Openat2(fd, name, &how)
			if err != unix.EINTR && err != unix.EAGAIN {
				break
			}
		}
		unix.Close(fd)
		switch {
		case errors.Is(err, unix.ELOOP):
			return -1, fmt.Errorf("%w: %s is a symbolic link; give the folder's real path", api.ErrInvalid, at)
		case errors.Is(err, unix.ENOTDIR):
			return -1, fmt.Errorf("%w: %s is not a folder", api.ErrInvalid, at)
		case errors.Is(err, unix.ENOENT):
			return -1, fmt.Errorf("%w: %s does not exist", api.ErrInvalid, at)
		case err != nil:
			return -1, fmt.Errorf("%w: open %s: %w", api.ErrInvalid, at, err)
		}
		fd = next
		if at != path {
			if err := notThroughFUSE(fd, at); err != nil {
				unix.Close(fd)
				return -1, err
			}
		}
	}
	if visit != nil {
		if err := visit(fd, at); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// notThroughFUSE refuses to walk on below fd (named at) if it is the root
// of a FUSE mount: a lookup there is answered by a daemon, possibly one a
// user runs, that may never answer (and hold up a start), or by this very
// daemon (a workspace it serves). Asking whether it is a mount root asks
// the filesystem nothing.
func notThroughFUSE(fd int, at string) error {
	id, root, err := fs.MountID(fd)
	if err != nil {
		return fmt.Errorf("check whether %s is a mount: %w", at, err)
	}
	if !root {
		return nil
	}
	e, ok, err := fs.LookupMount(id)
	if err != nil {
		return err
	}
	if ok && (e.FSType == "fuse" || strings.HasPrefix(e.FSType, "fuse.") || strings.HasPrefix(e.FSType, "fuseblk")) {
		return fmt.Errorf("%w: %s is a FUSE mount (%s); an inspection folder cannot lie in one", api.ErrInvalid, at, e.FSType)
	}
	return nil
}

// openInspectionDir resolves dir without following links and checks, on
// the descriptors of that walk, that an inspection mount for owner may
// cover it: not the data or workspaces folder nor inside them, a folder
// owned by owner (unless owner is root), not a mount root, and empty. It
// returns an O_PATH descriptor of the folder, which the mount is made
// onto, and the clean path the mount is known by; the caller closes the
// descriptor.
func (in *Inspections) openInspectionDir(dir string, owner uint32) (int, string, error) {
	if !filepath.IsAbs(dir) {
		return -1, "", fmt.Errorf("%w: %s is not an absolute path", api.ErrInvalid, call.Quote(dir))
	}
	dir = filepath.Clean(dir)
	fd, err := walkNoLinks(dir, func(fd int, at string) error {
		id, err := fileIDOf(fd)
		if err != nil {
			return fmt.Errorf("stat %s: %w", at, err)
		}
		switch id {
		case in.dataID:
			return fmt.Errorf("%w: %s is inside the data folder %s", api.ErrInvalid, dir, in.dataDir)
		case in.wsID:
			return fmt.Errorf("%w: %s is inside the workspaces folder %s", api.ErrInvalid, dir, in.wsReal)
		}
		return nil
	})
	if err != nil {
		return -1, "", err
	}
	if err := checkInspectionFd(fd, dir, owner); err != nil {
		unix.Close(fd)
		return -1, "", err
	}
	return fd, dir, nil
}

// checkInspectionFd checks the folder fd (named dir in messages) itself:
// its owner, that it is no mount root and that it is empty.
func checkInspectionFd(fd int, dir string, owner uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: %s is not a folder", api.ErrInvalid, dir)
	}
	if owner != 0 && st.Uid != owner {
		return fmt.Errorf("%w: %s belongs to uid %d, not to the caller (uid %d)", api.ErrForbidden, dir, st.Uid, owner)
	}
	// A mount first: a mount's own files would make it "not empty", and a
	// folder already served is a conflict, not a bad request.
	_, root, err := fs.MountID(fd)
	if err != nil {
		return fmt.Errorf("check whether %s is a mount: %w", dir, err)
	}
	if root {
		return fmt.Errorf("%w: %s is a mount point already", api.ErrConflict, dir)
	}
	return checkEmptyFd(fd, dir)
}

// checkEmptyFd refuses a folder with entries: a mount would hide them. It
// reads the folder fd names itself, opened again by "." below it.
func checkEmptyFd(fd int, dir string) error {
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", api.ErrInvalid, dir, err)
	}
	f := os.NewFile(uintptr(rfd), dir)
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", api.ErrInvalid, dir, err)
	}
	return fmt.Errorf("%w: %s is not empty (it holds %q)", api.ErrInvalid, dir, names[0])
}

// DetachStale lazily unmounts the warren mounts a crashed daemon left at
// path (an inspection mount's recorded path), reached without following
// links and detached through their own descriptors. A mount of another
// kind is left alone (the checks then refuse the folder). A path that cannot be walked has no
// stale mount of ours to detach.
func DetachStale(path string) error {
	for range 16 { // mounts may be stacked
		fd, err := walkNoLinks(path, nil)
		if err != nil {
			return nil
		}
		done, err := detachStaleAt(fd)
		unix.Close(fd)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("detach stale mount %s: still mounted after 16 detaches", path)
}

// detachStaleAt detaches the mount whose root fd is if it is a warren
// mount, and reports whether nothing is left to detach.
func detachStaleAt(fd int) (bool, error) {
	id, root, err := fs.MountID(fd)
	if err != nil || !root {
		return true, err
	}
	e, ok, err := fs.LookupMount(id)
	if err != nil || !ok || e.FSType != fs.FuseType {
		return true, err
	}
	if err := fs.DetachFd(fd); err != nil {
		return true, fmt.Errorf("detach stale mount %s: %w", e.Path, err)
	}
	return false, nil
}

// DetachStale is the package's DetachStale, for the threads' restore,
// which finishes a delete cut short (package threads, Inspections).
func (in *Inspections) DetachStale(path string) error { return DetachStale(path) }
