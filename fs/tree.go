package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The file API's tree calls: list, stat and exists here; mkdir, remove and
// rename in tree_change.go; raw content in stream.go. They resolve paths
// as Read does: relative to the workspace's root, links in the folders on
// the way followed by the kernel below the root (openat2 RESOLVE_BENEATH),
// never out of it. A call that acts on an entry itself (stat without
// follow, remove, rename) never follows a link as the last component: it
// acts on the link.
//
// Every entry a call looks at is taken through the ledger as a read would
// take it (its lock, its version brought up to date), but none records a
// read: listing a folder says nothing of what an agent knows of its
// files. Every modifying call holds the change gate, takes each path's
// lock, is refused for a stale read as a mount's operation would be,
// marks what it changed in the change log and tells the mounts before it
// returns.

// EntryType is the kind of an entry of a workspace.
type EntryType string

// The kinds of entries.
const (
	TypeFile    EntryType = "file"
	TypeDir     EntryType = "dir"
	TypeSymlink EntryType = "symlink"
	TypeOther   EntryType = "other" // a fifo, a socket, a device
)

// typeOf is the kind of the entry that st describes.
func typeOf(st *syscall.Stat_t) EntryType {
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return TypeFile
	case syscall.S_IFDIR:
		return TypeDir
	case syscall.S_IFLNK:
		return TypeSymlink
	}
	return TypeOther
}

// EntryInfo describes one entry of a workspace.
type EntryInfo struct {
	// Path is where it is inside the workspace, "/"-separated, as the
	// caller named it (through links, if it went through some),
	// cleaned; "." for the root. Name is its last name.
	Path string
	Name string
	Type EntryType
	// Size is the length of a file's content or of a link's target; a
	// folder's is the filesystem's own.
	Size int64
	// Mode is the permission bits, with the set-id and sticky bits
	// (mode & 07777).
	Mode  uint32
	MTime time.Time
	// Version is the ledger's version of the path: it moves on every
	// change. The root has none (0).
	Version uint64
	Target  string // a symlink's target, as written
}

// NotFolderError: a path that should be a folder holds something else.
type NotFolderError struct{ Path string }

func (e *NotFolderError) Error() string { return fmt.Sprintf("%s is not a folder.", e.Path) }

// Unwrap makes errors.Is(err, syscall.ENOTDIR) true.
func (e *NotFolderError) Unwrap() error { return syscall.ENOTDIR }

// describe fills what st says of the entry name at rel.
func describe(name, rel string, st *syscall.Stat_t) EntryInfo {
	return EntryInfo{
		Name:  name,
		Path:  rel,
		Type:  typeOf(st),
		Size:  st.Size,
		Mode:  st.Mode & 0o7777,
		MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
	}
}

// peek stats t under its lock and brings its version up to date as a
// read would, without recording a read. A change the ledger sees there
// for the first time (made behind the filesystem's back) is marked: the
// whole tree where a folder is another folder now, else the path alone
// (a folder whose own entries changed has each of them marked where the
// change was made, so a listing does not make the next checkpoint read
// the whole tree). A missing entry is an iofs.ErrNotExist.
func (f *Files) peek(t *target, st *syscall.Stat_t) (uint64, error) {
	l := f.hub.ledger
	ps, _, unlock := l.lock(t.key)
	defer unlock()
	if err := fstatat(t.dirFd, t.name, st); err != nil {
		if err == unix.ENOENT {
			return 0, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
		}
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	fp := fingerprintOf(st)
	known, old, v := ps.known, ps.fp, ps.version
	if now := l.current(t.key, ps, fp); known && now != v {
		f.track(t, fp.dir && fp.ino != old.ino)
	}
	return ps.version, nil
}

// List returns the entries of the folder at p, sorted by name, each with
// its version; the file API's hidden temporary files are left out. Links
// on the way, the last one too, are followed inside the workspace; what
// p names must be a folder (a *NotFolderError otherwise). An entry
// removed while the folder is listed is left out.
func (f *Files) List(ctx context.Context, a Actor, p string) ([]EntryInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := f.resolveAs(p, followLast|resolveRoot)
	if err != nil {
		return nil, err
	}
	defer t.close()
	shown := path.Clean(p)
	var fd int
	if t.root {
		fd, err = reopen(t.dirFd, unix.O_RDONLY|unix.O_DIRECTORY)
	} else {
		fd, err = openat2Retry(t.dirFd, t.name, &readFolder)
	}
	switch {
	case err == unix.ENOENT:
		return nil, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
	case err == unix.ENOTDIR:
		return nil, &NotFolderError{Path: t.rel}
	case err == unix.ELOOP:
		// A link put in its place since it was resolved.
		return nil, fmt.Errorf("%s: changed while it was opened: %w", t.rel, err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	dir := os.NewFile(uintptr(fd), t.rel)
	defer dir.Close()
	var dirSt syscall.Stat_t
	gen, err := statGen(fd, "", &dirSt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: list: %w", t.rel, err)
	}
	slices.Sort(names)
	out := make([]EntryInfo, 0, len(names))
	for _, name := range names {
		if IsTempName(name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := &target{dirFd: fd, name: name, rel: joinRel(t.rel, name), dirSt: dirSt, key: pathKey{dev: dirSt.Dev, dir: dirSt.Ino, gen: gen, name: name}}
		info, err := f.describeTarget(e)
		if errors.Is(err, iofs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		info.Path = joinRel(shown, name)
		out = append(out, info)
	}
	return out, nil
}

// describeTarget describes the entry t itself (a link is not followed).
func (f *Files) describeTarget(t *target) (EntryInfo, error) {
	var st syscall.Stat_t
	v, err := f.peek(t, &st)
	if err != nil {
		return EntryInfo{}, err
	}
	info := describe(t.name, t.rel, &st)
	info.Version = v
	if info.Type == TypeSymlink {
		target, err := readlinkAt(t.dirFd, t.name)
		if err == unix.ENOENT {
			return EntryInfo{}, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
		}
		if err != nil {
			return EntryInfo{}, fmt.Errorf("%s: read the link: %w", t.rel, err)
		}
		info.Target = target
	}
	return info, nil
}

// Stat describes the entry at p. With follow, a link as the last
// component is followed inside the workspace (as Read does) and its
// target is described; without, the link itself. A missing entry is an
// error matching iofs.ErrNotExist.
func (f *Files) Stat(ctx context.Context, a Actor, p string, follow bool) (EntryInfo, error) {
	if err := ctx.Err(); err != nil {
		return EntryInfo{}, err
	}
	how := resolveRoot
	if follow {
		how |= followLast
	}
	t, err := f.resolveAs(p, how)
	if err != nil {
		return EntryInfo{}, err
	}
	defer t.close()
	info := describe(".", ".", &t.dirSt)
	if !t.root {
		if info, err = f.describeTarget(t); err != nil {
			return EntryInfo{}, err
		}
	}
	// Named as asked, whatever links were followed.
	info.Path = path.Clean(p)
	info.Name = path.Base(info.Path)
	return info, nil
}

// Exists reports whether p names an entry, and its kind. A link as the
// last component is followed, as test -e does: a link to nothing, or a
// loop of links, is (false, ""). Only a path that leads out of the workspace (an
// *OutsideError) or a failing system call is an error; a missing name, a
// missing folder or a file in place of a folder on the way are not.
func (f *Files) Exists(ctx context.Context, a Actor, p string) (bool, EntryType, error) {
	if err := ctx.Err(); err != nil {
		return false, "", err
	}
	t, err := f.resolveAs(p, followLast|resolveRoot)
	if err != nil {
		// Nothing there, or a chain of links that never ends.
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return false, "", nil
		}
		return false, "", err
	}
	defer t.close()
	if t.root {
		return true, TypeDir, nil
	}
	var st syscall.Stat_t
	if err := fstatat(t.dirFd, t.name, &st); err != nil {
		if err == unix.ENOENT {
			return false, "", nil
		}
		return false, "", fmt.Errorf("%s: %w", t.rel, err)
	}
	return true, typeOf(&st), nil
}

// joinRel joins a path inside the workspace and a name: "." is the root.
func joinRel(dir, name string) string {
	if dir == "." || dir == "" {
		return name
	}
	return path.Join(dir, name)
}
