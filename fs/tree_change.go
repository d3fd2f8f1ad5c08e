package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The file API's modifying tree calls: Mkdir, Remove and Rename. Each holds
// the folder's change gate for its whole length, takes every path it
// changes under that path's lock (Rename both, in the ledger's order),
// records the change as the actor's, marks it in the change log and tells
// the mounts, which have seen it once the call returns (Hub.flush).

// ExistsError: an entry is where a call would make one.
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string { return fmt.Sprintf("%s already exists.", e.Path) }

// Unwrap makes errors.Is(err, iofs.ErrExist) true.
func (e *ExistsError) Unwrap() error { return syscall.EEXIST }

// NotEmptyError: a folder to remove, or to rename over, holds entries.
type NotEmptyError struct{ Path string }

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("%s is a folder that is not empty.", e.Path)
}

// Unwrap makes errors.Is(err, syscall.ENOTEMPTY) true.
func (e *NotEmptyError) Unwrap() error { return syscall.ENOTEMPTY }

// RootError: a call that cannot act on the workspace's root itself.
type RootError struct {
	Op string // what cannot be done: "removed", "moved", "replaced"
}

func (e *RootError) Error() string { return fmt.Sprintf("The workspace's root cannot be %s.", e.Op) }

// LinkOutError: a rename that would carry a symlink (the entry moved, or
// one in the tree of a folder moved) to a place from which it leads out
// of the workspace. Nothing moved.
type LinkOutError struct {
	From, To string
	Why      string // which link, and how it would lead out
}

func (e *LinkOutError) Error() string {
	return fmt.Sprintf("%s cannot move to %s: a link would lead outside the workspace (%s).", e.From, e.To, e.Why)
}

// Unwrap makes errors.Is(err, syscall.EPERM) true.
func (e *LinkOutError) Unwrap() error { return syscall.EPERM }

// refuse logs a refusal of the file API as a mount logs one of its own.
func (f *Files) refuse(op, path, target, reason string) {
	f.hub.log.Warn("refused", "workspace", f.label, "op", op, "path", path, "target", target, "reason", reason)
}

// Mkdir makes the folder p with exactly mode's permission bits, owned by
// the owner of the folder it is made in. With parents, missing folders on
// the way are made too (each with mode), and an existing folder (or a
// link to one) is no error, as mkdir -p; without, p's folder must exist
// and an entry at p is an *ExistsError.
func (f *Files) Mkdir(ctx context.Context, a Actor, p string, parents bool, mode uint32) error {
	err := f.mkdir(ctx, a, p, parents, mode)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return err
}

func (f *Files) mkdir(ctx context.Context, a Actor, p string, parents bool, mode uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	clean, err := f.cleanRel(p)
	if err != nil {
		return err
	}
	defer f.changes.enter()()
	if clean == "." {
		if parents {
			return nil
		}
		return &ExistsError{Path: p}
	}
	if !parents {
		return f.makeFolder(ctx, a, clean, mode, false)
	}
	parts := strings.Split(clean, "/")
	for i := range parts {
		if err := f.makeFolder(ctx, a, strings.Join(parts[:i+1], "/"), mode, true); err != nil {
			return err
		}
	}
	return nil
}

// cleanRel cleans p, a path inside the workspace: "." is the root. A path
// that leads out as written is an *OutsideError.
func (f *Files) cleanRel(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "/") {
		return "", &OutsideError{Path: p}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &OutsideError{Path: p}
	}
	return clean, nil
}

// makeFolder makes the folder p, whose folder exists; with existingOK a
// folder (or a link to one) found there is fine. The change gate is held.
func (f *Files) makeFolder(ctx context.Context, a Actor, p string, mode uint32, existingOK bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := f.resolveAs(p, 0)
	if err != nil {
		return err
	}
	defer t.close()
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return err
	}
	defer unlock()
	// Made private, then given its owner and mode: never open to others
	// in between.
	err = unix.Mkdirat(t.dirFd, t.name, 0o700)
	if err == unix.EEXIST {
		if !existingOK {
			return &ExistsError{Path: t.rel}
		}
		switch ok, err := f.isFolder(t); {
		case err != nil:
			return err
		case !ok:
			return &ExistsError{Path: t.rel}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("make folder %s: %w", t.rel, err)
	}
	fd, err := openChild(t.dirFd, t.name)
	if err == nil {
		chownLike(fd, &t.dirSt)
		if err = fchmod(fd, mode&0o7777); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		unix.Unlinkat(t.dirFd, t.name, unix.AT_REMOVEDIR)
		return fmt.Errorf("make folder %s: %w", t.rel, err)
	}
	defer unix.Close(fd)
	fp := fingerprintFd(fd)
	f.hub.ledger.modified(a, g.key, g.state, fp)
	f.hub.changed(t.dirSt.Dev, fp.ino, t.dirSt.Ino, t.name)
	f.track(t, true)
	f.changedAt(Created, t.rel, a, g.state.version)
	// The new folder survives a power loss, as a file written in it will.
	if err := syncDir(t.dirFd); err != nil {
		return fmt.Errorf("make folder %s: fsync its folder: %w", t.rel, err)
	}
	return nil
}

// isFolder says whether t is a folder, or a link that leads, inside the
// workspace, to one; a link that leads out is an *OutsideError.
func (f *Files) isFolder(t *target) (bool, error) {
	var st syscall.Stat_t
	if err := fstatat(t.dirFd, t.name, &st); err != nil {
		return false, fmt.Errorf("%s: %w", t.rel, err)
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return true, nil
	case syscall.S_IFLNK:
		lt, err := f.resolveAs(t.rel, followLast|resolveRoot)
		var out *OutsideError
		if errors.As(err, &out) {
			return false, err
		}
		if err != nil {
			return false, nil
		}
		defer lt.close()
		if lt.root {
			return true, nil
		}
		return fstatat(lt.dirFd, lt.name, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR, nil
	}
	return false, nil
}

// Remove removes the entry at p: a file, a link (never what it leads
// to), or an empty folder; with recursive, a folder and its whole tree,
// each entry under its own lock, children before their folder, no link
// followed on the way. It returns how many entries it removed. A
// non-empty folder without recursive is a *NotEmptyError, the root a
// *RootError, a missing entry an iofs.ErrNotExist.
//
// No lost edits: if a read a file to be removed before its last change,
// the call is refused with a *StaleError. A recursive remove checks the
// whole tree first, each file under its lock in turn, and removes nothing
// if one is stale; then it removes, checking each file again under the
// lock it is removed under. A change made by another actor between the
// two passes to a file a had read is caught by that second check, and
// the call stops there, refused, with what it removed before gone: a
// race can leave a recursive remove half done, never a stale file
// removed.
func (f *Files) Remove(ctx context.Context, a Actor, p string, recursive bool) (int, error) {
	var tl told
	n, err := f.remove(ctx, a, p, recursive, &tl)
	// Sent with no lock and no gate held, waiting for room rather than
	// dropped, as a restore's: a big tree makes many.
	f.hub.postWait(tl.ns...)
	f.hub.flush()
	return n, err
}

func (f *Files) remove(ctx context.Context, a Actor, p string, recursive bool, tl *told) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	defer f.changes.enter()()
	t, err := f.resolveAs(p, resolveRoot)
	if err != nil {
		return 0, err
	}
	defer t.close()
	if t.root {
		return 0, &RootError{Op: "removed"}
	}
	var st syscall.Stat_t
	if err := fstatat(t.dirFd, t.name, &st); err != nil {
		if err == unix.ENOENT {
			return 0, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
		}
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	if !recursive || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		n, err := f.removeOne(a, t, tl)
		if err == nil {
			f.changedAt(Removed, t.rel, a, 0)
		}
		return n, err
	}
	if err := f.checkTreeStale(ctx, a, t.dirFd, &t.dirSt, t.key.gen, t.name, t.rel, 0); err != nil {
		return 0, err
	}
	rm := &removal{a: a, check: func(t *target, g guarded) error {
		return f.refuseIfStale("remove", a, t, g)
	}}
	err = f.removeEntry(ctx, tl, rm, t.dirFd, &t.dirSt, t.key.gen, t.name, t.rel, 0)
	if errors.Is(err, unix.ENOTEMPTY) {
		// Filled faster than it was emptied, round after round.
		err = &NotEmptyError{Path: t.rel}
	}
	if err == nil {
		f.changedAt(Removed, t.rel, a, 0) // the folder, its tree with it
	}
	return rm.removed, err
}

// removeOne removes the entry t, an empty folder or anything else, under
// its lock. The change gate is held.
func (f *Files) removeOne(a Actor, t *target, tl *told) (int, error) {
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if g.state.fp == (fingerprint{}) {
		return 0, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
	}
	if err := f.refuseIfStale("remove", a, t, g); err != nil {
		return 0, err
	}
	flags := 0
	if g.state.fp.dir {
		flags = unix.AT_REMOVEDIR
	}
	switch err := unix.Unlinkat(t.dirFd, t.name, flags); err {
	case nil:
	case unix.ENOTEMPTY, unix.EEXIST:
		return 0, &NotEmptyError{Path: t.rel}
	case unix.ENOENT:
		return 0, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
	default:
		return 0, fmt.Errorf("remove %s: %w", t.rel, err)
	}
	f.changedTargetBy(a, tl, t, g, g.state.fp.ino, fingerprint{}, g.state.fp.dir)
	return 1, nil
}

// checkTreeStale is the first pass of a recursive remove: every file and
// link of the tree at name in the folder dirFd is taken under its lock in
// turn and checked against a's reads; the first that a read before its
// last change refuses the call. Folders have no reads. No lock is held
// while another is taken, and no link is followed.
func (f *Files) checkTreeStale(ctx context.Context, a Actor, dirFd int, dirSt *syscall.Stat_t, dirGen uint64, name, rel string, depth int) error {
	if a.none() || f.hub.ledger.off {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > maxRemoveDepth {
		return fmt.Errorf("%s: %w", rel, unix.ELOOP)
	}
	var st syscall.Stat_t
	if err := fstatat(dirFd, name, &st); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("%s: %w", rel, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t := &target{dirFd: dirFd, name: name, rel: rel, dirSt: *dirSt, key: pathKey{dev: dirSt.Dev, dir: dirSt.Ino, gen: dirGen, name: name}}
		g, unlock, err := f.lockTarget(t)
		if err != nil {
			return err
		}
		defer unlock()
		return f.refuseIfStale("remove", a, t, g)
	}
	fd, err := openat2Retry(dirFd, name, &readFolder)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			return nil // gone, or no longer a folder: the second pass sees it
		}
		return fmt.Errorf("%s: %w", rel, err)
	}
	dir := os.NewFile(uintptr(fd), rel)
	defer dir.Close()
	var fst syscall.Stat_t
	gen, err := statGen(fd, "", &fst)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	for {
		names, err := dir.Readdirnames(1024)
		for _, child := range names {
			if err := f.checkTreeStale(ctx, a, fd, &fst, gen, child, rel+"/"+child, depth+1); err != nil {
				return err
			}
		}
		if len(names) == 0 || err != nil {
			if err == nil || err == io.EOF {
				return nil
			}
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
}

// Rename moves the entry at from to to, inside the workspace, and returns
// the version to now has. Links in the folders on the way are followed
// inside the workspace; the last component of either path never is:
// renaming a link moves the link. to's folder must exist. An entry at to
// is an *ExistsError unless overwrite; then it is replaced as rename(2)
// replaces (a file by a file, an empty folder by a folder), and refused
// with a *StaleError if a read it before its last change.
//
// A move to another folder is refused with a *LinkOutError if it would
// carry a symlink to a place from which it leads out of the workspace:
// the entry itself, or any link in a moved folder's tree, judged from its
// new place as a mount's rename judges it (linkJudge.checkMove); a tree
// too big to check is refused with EXDEV (copy it instead). A rename
// within one folder moves no link's starting point and is not checked.
func (f *Files) Rename(ctx context.Context, a Actor, from, to string, overwrite bool) (uint64, error) {
	v, err := f.rename(ctx, a, from, to, overwrite)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return v, err
}

func (f *Files) rename(ctx context.Context, a Actor, from, to string, overwrite bool) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	src, err := f.resolveAs(from, resolveRoot)
	if err != nil {
		return 0, err
	}
	defer src.close()
	dst, err := f.resolveAs(to, resolveRoot)
	if err != nil {
		return 0, err
	}
	defer dst.close()
	if src.root {
		return 0, &RootError{Op: "moved"}
	}
	if dst.root {
		return 0, &RootError{Op: "replaced"}
	}
	if src.dirSt.Dev != dst.dirSt.Dev || src.dirSt.Ino != dst.dirSt.Ino {
		var why string
		j := linkJudge{root: f.fd, refuse: func(op, path, target, reason string) {
			f.refuse(op, path, target, reason)
			why = reason
			if target != "" {
				why = fmt.Sprintf("%s -> %s: %s", path, target, reason)
			}
		}}
		switch errno := j.checkMove(moveEnd{src.dirFd, src.name, src.rel}, moveEnd{dst.dirFd, dst.name, dst.rel}, false); errno {
		case 0:
		case syscall.EPERM:
			return 0, &LinkOutError{From: src.rel, To: dst.rel, Why: why}
		case syscall.EXDEV:
			return 0, fmt.Errorf("%s cannot move to %s in one step (%s); copy it instead: %w", src.rel, dst.rel, why, errno)
		default:
			return 0, fmt.Errorf("rename %s to %s: check its links: %w", src.rel, dst.rel, errno)
		}
	}
	// The gate after the links' check, which may walk a big tree, as a
	// mount's rename does: a checkpoint does not wait for it.
	defer f.changes.enter()()
	l := f.hub.ledger
	srcState, dstState, unlock := l.lock(src.key, dst.key)
	defer unlock()
	sg, dg := guarded{key: src.key, state: srcState}, guarded{key: dst.key, state: dstState}
	if moved, err := l.refresh(sg, src.dirFd, src.name); err != nil {
		return 0, fmt.Errorf("%s: %w", src.rel, err)
	} else if moved {
		f.track(src, sg.state.fp.dir)
	}
	if src.key == dst.key {
		// Renamed onto itself: nothing moves.
		if sg.state.fp == (fingerprint{}) {
			return 0, fmt.Errorf("%s: %w", src.rel, iofs.ErrNotExist)
		}
		return sg.state.version, nil
	}
	if moved, err := l.refresh(dg, dst.dirFd, dst.name); err != nil {
		return 0, fmt.Errorf("%s: %w", dst.rel, err)
	} else if moved {
		f.track(dst, dg.state.fp.dir)
	}
	moving := sg.state.fp
	if moving == (fingerprint{}) {
		return 0, fmt.Errorf("%s: %w", src.rel, iofs.ErrNotExist)
	}
	replaced := dg.state.fp
	var flags uint
	if replaced != (fingerprint{}) {
		if !overwrite {
			return 0, &ExistsError{Path: dst.rel}
		}
		// Renaming over a file read before its last change would throw
		// that change away: refused, as on a mount.
		if err := f.refuseIfStale("rename", a, dst, dg); err != nil {
			return 0, err
		}
	} else if !overwrite {
		flags = unix.RENAME_NOREPLACE
	}
	switch err := unix.Renameat2(src.dirFd, src.name, dst.dirFd, dst.name, flags); err {
	case nil:
	case unix.EEXIST:
		if flags&unix.RENAME_NOREPLACE != 0 {
			return 0, &ExistsError{Path: dst.rel}
		}
		return 0, &NotEmptyError{Path: dst.rel}
	case unix.ENOTEMPTY:
		return 0, &NotEmptyError{Path: dst.rel}
	case unix.ENOENT:
		return 0, fmt.Errorf("%s: %w", src.rel, iofs.ErrNotExist)
	case unix.EINVAL:
		return 0, fmt.Errorf("%s cannot move into itself (%s): %w", src.rel, dst.rel, err)
	case unix.EISDIR:
		return 0, fmt.Errorf("%s cannot replace the folder %s: %w", src.rel, dst.rel, err)
	case unix.ENOTDIR:
		return 0, fmt.Errorf("the folder %s cannot replace %s, which is not one: %w", src.rel, dst.rel, err)
	default:
		return 0, fmt.Errorf("rename %s to %s: %w", src.rel, dst.rel, err)
	}
	srcFp, _ := fingerprintAt(src.dirFd, src.name)
	dstFp, _ := fingerprintAt(dst.dirFd, dst.name)
	if srcFp == (fingerprint{}) {
		l.removed(a, sg.key, sg.state)
	} else {
		l.modified(a, sg.key, sg.state, srcFp)
	}
	v := l.modified(a, dg.key, dg.state, dstFp)
	// The names now lead elsewhere: the mounts look them up again, and
	// forget what they knew of the replaced entry.
	f.hub.changed(src.dirSt.Dev, moving.ino, src.dirSt.Ino, src.name)
	gone := replaced.ino
	if gone == 0 {
		gone = moving.ino // nothing replaced: the entry's own, once more
	}
	f.hub.changed(dst.dirSt.Dev, gone, dst.dirSt.Ino, dst.name)
	// A folder moved brings its whole tree.
	f.track(src, moving.dir)
	f.track(dst, moving.dir)
	if f.watch.active() {
		f.watch.onChange(EntryChange{Kind: Renamed, From: slashed(src.rel), Path: slashed(dst.rel), Actor: a, Version: dg.state.version})
	}
	// Both entries survive a power loss as they are now.
	if err := syncDir(dst.dirFd); err != nil {
		return v, fmt.Errorf("rename %s to %s: fsync its folder: %w", src.rel, dst.rel, err)
	}
	if src.dirSt.Ino != dst.dirSt.Ino || src.dirSt.Dev != dst.dirSt.Dev {
		if err := syncDir(src.dirFd); err != nil {
			return v, fmt.Errorf("rename %s to %s: fsync its folder: %w", src.rel, dst.rel, err)
		}
	}
	return v, nil
}
