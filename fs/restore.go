package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Restoring a checkpoint. A restore makes the entries of a workspace what
// a checkpoint recorded: it removes, makes and replaces them one by one,
// each under its path's lock and through the ledger, as a modification by
// nobody in particular: every version it touches moves, so every actor's
// earlier read of those paths is stale and a write based on it is
// refused, as after any other change. Each file is replaced atomically
// (written aside, then renamed over the old one), so a reader sees the old
// or the new content, never a mix. The mounts are told of each change and
// the change log marks it.
//
// Paths are exact: no link is followed, in the folders above or at the
// end; a link is an entry like any other, replaced or removed as itself.
// Files are not fsync'ed one by one: Sync makes everything durable at the
// end, and the caller's journal covers a crash before that (a restore is
// run again until it finished).

// restoreCopyBuf is the size of a restore's copy buffer: big files are
// copied in few writes.
const restoreCopyBuf = 256 << 10

// Restorer changes a workspace's entries for a restore. Get one from
// Files.Restorer; it is valid while its Files is.
type Restorer struct {
	f *Files
}

// Restorer returns the workspace's Restorer.
func (f *Files) Restorer() *Restorer { return &Restorer{f: f} }

// errRootPath: an operation that cannot act on the workspace's root.
var errRootPath = errors.New("the workspace's root itself")

// resolveExact finds p (relative to the workspace's root) without
// following any link: every folder on the way must be a folder. The
// target's folder must exist.
func (f *Files) resolveExact(p string) (*target, error) {
	if strings.IndexByte(p, 0) >= 0 || path.IsAbs(p) {
		return nil, &OutsideError{Path: p}
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, &OutsideError{Path: p}
	}
	if clean == "." {
		return nil, fmt.Errorf("%s: %w", p, errRootPath)
	}
	dir, name := path.Split(clean)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	dirFd, err := openat2Retry(f.fd, dir, &how)
	if err != nil {
		return nil, fmt.Errorf("%s: open its folder: %w", clean, err)
	}
	if errno := checkName(name); errno != 0 {
		unix.Close(dirFd)
		return nil, fmt.Errorf("%s: %w", clean, errno)
	}
	t := &target{dirFd: dirFd, name: name, rel: clean}
	gen, err := statGen(dirFd, "", &t.dirSt)
	if err != nil {
		unix.Close(dirFd)
		return nil, fmt.Errorf("%s: %w", clean, err)
	}
	t.key = pathKey{dev: t.dirSt.Dev, dir: t.dirSt.Ino, gen: gen, name: name}
	return t, nil
}

// changedTarget records, under t's lock, that t now holds fp (nothing:
// removed) by nobody in particular, marks it (tree: and everything below
// it), and notes what to tell the mounts. oldIno is the inode t held
// before.
func (f *Files) changedTarget(tl *told, t *target, g guarded, oldIno uint64, fp fingerprint, tree bool) {
	f.changedTargetBy(Actor{}, tl, t, g, oldIno, fp, tree)
}

// changedTargetBy is changedTarget for a change made by a.
func (f *Files) changedTargetBy(a Actor, tl *told, t *target, g guarded, oldIno uint64, fp fingerprint, tree bool) {
	if fp == (fingerprint{}) {
		f.hub.ledger.removed(a, g.key, g.state)
	} else {
		f.hub.ledger.modified(a, g.key, g.state, fp)
	}
	tl.changed(t, oldIno)
	if fp.ino != 0 && fp.ino != oldIno {
		tl.changed(t, fp.ino)
	}
	f.track(t, tree)
}

// told gathers what one step of a restore tells the mounts: the notices
// are sent once the step let go of its locks and of the change gate, and
// waited for rather than dropped (Hub.postWait), so that a mount never
// shows what a restore replaced.
type told struct{ ns []notice }

// changed notes that t, which held the inode ino, changed.
func (tl *told) changed(t *target, ino uint64) {
	tl.ns = append(tl.ns, notice{dev: t.dirSt.Dev, ino: t.dirSt.Ino, name: t.name}, notice{dev: t.dirSt.Dev, ino: ino})
}

// step runs one change of a restore under the change gate, then tells the
// mounts what it changed.
func (r *Restorer) step(ctx context.Context, fn func(tl *told) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var tl told
	leave := r.f.changes.enter()
	err := fn(&tl)
	leave()
	r.f.hub.postWait(tl.ns...)
	return err
}

// RemoveAll removes the entry at p and, if it is a folder, everything in
// it. A missing entry is not an error.
func (r *Restorer) RemoveAll(ctx context.Context, p string) error {
	return r.step(ctx, func(tl *told) error {
		t, err := r.f.resolveExact(p)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("remove %s: %w", p, err)
		}
		defer t.close()
		if err := r.f.removeEntry(ctx, tl, &removal{}, t.dirFd, &t.dirSt, t.key.gen, t.name, t.rel, 0); err != nil {
			return fmt.Errorf("remove %s: %w", t.rel, err)
		}
		return nil
	})
}

// maxRemoveDepth bounds the folders below one another that removeEntry
// goes down: deeper than any path the kernel can name from the root.
const maxRemoveDepth = unix.PathMax / 2

// removal is what a removal of a tree does beside removing: whose
// removal the ledger records, the check made under each entry's lock
// before it goes, and how many entries went. A restore's is the zero
// removal: by nobody in particular, unchecked.
type removal struct {
	a Actor
	// check, if set, may refuse an entry, under its lock, before it is
	// removed: the removal stops there with its error.
	check   func(t *target, g guarded) error
	removed int
}

// removeEntry removes name from the folder dirFd (dirSt, dirGen) and, for
// a folder, its whole tree, each entry under its own lock, children
// before their folder; no lock is held while another is taken, and no
// link is followed. The change gate is held.
func (f *Files) removeEntry(ctx context.Context, tl *told, rm *removal, dirFd int, dirSt *syscall.Stat_t, dirGen uint64, name, rel string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > maxRemoveDepth {
		return fmt.Errorf("%s: %w", rel, unix.ELOOP)
	}
	t := &target{dirFd: dirFd, name: name, rel: rel, dirSt: *dirSt, key: pathKey{dev: dirSt.Dev, dir: dirSt.Ino, gen: dirGen, name: name}}
	// A folder's entries go first, then the folder; something made in it
	// meanwhile (a command still running) is removed on the next round.
	for range 8 {
		var st syscall.Stat_t
		if err := fstatat(dirFd, name, &st); err != nil {
			if err == unix.ENOENT {
				return nil
			}
			return fmt.Errorf("%s: %w", rel, err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if err := f.emptyFolder(ctx, tl, rm, dirFd, name, rel, depth); err != nil {
				return err
			}
		}
		g, unlock, err := f.lockTarget(t)
		if err != nil {
			return err
		}
		if rm.check != nil {
			if err := rm.check(t, g); err != nil {
				unlock()
				return err
			}
		}
		flags := 0
		if g.state.fp.dir {
			flags = unix.AT_REMOVEDIR
		}
		err = unix.Unlinkat(dirFd, name, flags)
		if err == nil || err == unix.ENOENT {
			if err == nil {
				rm.removed++
			}
			f.changedTargetBy(rm.a, tl, t, g, g.state.fp.ino, fingerprint{}, true)
			unlock()
			return nil
		}
		unlock()
		if err != unix.ENOTEMPTY && err != unix.EISDIR && err != unix.ENOTDIR {
			return fmt.Errorf("%s: %w", rel, err)
		}
		// Filled, or replaced by something of another kind, in between.
	}
	return fmt.Errorf("%s: %w", rel, unix.ENOTEMPTY)
}

// emptyFolder removes every entry of the folder name in dirFd.
func (f *Files) emptyFolder(ctx context.Context, tl *told, rm *removal, dirFd int, name, rel string, depth int) error {
	fd, err := openat2Retry(dirFd, name, &readFolder)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			return nil // gone, or no longer a folder: the caller sees it
		}
		return fmt.Errorf("%s: %w", rel, err)
	}
	dir := os.NewFile(uintptr(fd), rel)
	defer dir.Close()
	var st syscall.Stat_t
	gen, err := statGen(fd, "", &st)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	for {
		names, err := dir.Readdirnames(1024)
		for _, child := range names {
			if err := f.removeEntry(ctx, tl, rm, fd, &st, gen, child, rel+"/"+child, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
}

// readFolder opens one name below a folder as a folder to read, following
// no link and crossing no mount.
var readFolder = unix.OpenHow{
	Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

// Mkdir makes the folder p, or finds it made, and gives it mode. Its
// folder must exist.
func (r *Restorer) Mkdir(ctx context.Context, p string, mode uint32) error {
	return r.step(ctx, func(tl *told) error {
		t, err := r.f.resolveExact(p)
		if err != nil {
			return fmt.Errorf("make folder %s: %w", p, err)
		}
		defer t.close()
		g, unlock, err := r.f.lockTarget(t)
		if err != nil {
			return fmt.Errorf("make folder %s: %w", p, err)
		}
		defer unlock()
		made := false
		if err := unix.Mkdirat(t.dirFd, t.name, 0o700); err == nil {
			made = true
		} else if err != unix.EEXIST {
			return fmt.Errorf("make folder %s: %w", t.rel, err)
		}
		fd, err := openChild(t.dirFd, t.name)
		if err != nil {
			return fmt.Errorf("make folder %s: %w", t.rel, err)
		}
		defer unix.Close(fd)
		var st syscall.Stat_t
		if err := fstat(fd, &st); err != nil {
			return fmt.Errorf("make folder %s: %w", t.rel, err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return fmt.Errorf("make folder %s: %w", t.rel, unix.ENOTDIR)
		}
		if made {
			chownLike(fd, &t.dirSt)
		}
		if st.Mode&0o7777 != mode&0o7777 || made {
			if err := fchmod(fd, mode&0o7777); err != nil {
				return fmt.Errorf("make folder %s: set its mode: %w", t.rel, err)
			}
		}
		fp := fingerprintFd(fd)
		if made {
			r.f.changedTarget(tl, t, g, 0, fp, true)
			return nil
		}
		r.f.hub.ledger.touched(g.state, fp)
		tl.changed(t, st.Ino)
		r.f.track(t, false)
		return nil
	})
}

// Chmod gives the entry at p mode; a link has none and is left alone.
func (r *Restorer) Chmod(ctx context.Context, p string, mode uint32) error {
	return r.step(ctx, func(tl *told) error {
		t, err := r.f.resolveExact(p)
		if err != nil {
			return fmt.Errorf("set the mode of %s: %w", p, err)
		}
		defer t.close()
		g, unlock, err := r.f.lockTarget(t)
		if err != nil {
			return fmt.Errorf("set the mode of %s: %w", p, err)
		}
		defer unlock()
		fd, err := openChild(t.dirFd, t.name)
		if err != nil {
			return fmt.Errorf("set the mode of %s: %w", t.rel, err)
		}
		defer unix.Close(fd)
		var st syscall.Stat_t
		if err := fstat(fd, &st); err != nil {
			return fmt.Errorf("set the mode of %s: %w", t.rel, err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			return nil
		}
		if err := fchmod(fd, mode&0o7777); err != nil {
			return fmt.Errorf("set the mode of %s: %w", t.rel, err)
		}
		r.f.hub.ledger.touched(g.state, fingerprintFd(fd))
		tl.changed(t, st.Ino)
		r.f.track(t, false)
		return nil
	})
}

// WriteFile replaces the entry at p with a regular file of mode holding
// what content gives, atomically: until the rename the old entry is
// whole. A folder at p is refused (remove it first).
func (r *Restorer) WriteFile(ctx context.Context, p string, mode uint32, content io.Reader) error {
	return r.step(ctx, func(tl *told) error {
		t, err := r.f.resolveExact(p)
		if err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		defer t.close()
		r.f.hub.sweepTemps(t.dirFd, &t.dirSt, r.f.label)
		tmp, err := r.f.hub.temps.newTemp(t.dirFd, &t.dirSt)
		if err != nil {
			return fmt.Errorf("write %s: make a temporary file: %w", t.rel, err)
		}
		defer tmp.discard()
		// The content first, with no lock held: it may be big. A sparse
		// file's holes stay holes: the file is cut to its size, and only
		// its data is written.
		if sc, ok := content.(sparseContent); ok {
			if err := unix.Ftruncate(tmp.fd, sc.Size()); err != nil {
				return fmt.Errorf("write %s: set its size: %w", t.rel, err)
			}
			if err := sc.WriteSparse(ctx, fdWriterAt(tmp.fd)); err != nil {
				return fmt.Errorf("write %s: %w", t.rel, err)
			}
		} else {
			buf, _ := r.f.hub.copyBufs.Get().(*[]byte)
			if buf == nil {
				b := make([]byte, restoreCopyBuf)
				buf = &b
			}
			_, err := io.CopyBuffer(fdWriter(tmp.fd), &ctxReader{ctx: ctx, r: content}, *buf)
			r.f.hub.copyBufs.Put(buf)
			if err != nil {
				return fmt.Errorf("write %s: %w", t.rel, err)
			}
		}
		g, unlock, err := r.f.lockTarget(t)
		if err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		defer unlock()
		if g.state.fp.dir {
			return fmt.Errorf("write %s: %w", t.rel, unix.EISDIR)
		}
		// The old file's owner, or the folder's for a new one. Owner
		// before mode: a chown clears the set-id bits.
		uid, gid := int(t.dirSt.Uid), int(t.dirSt.Gid)
		var old syscall.Stat_t
		if err := fstatat(t.dirFd, t.name, &old); err == nil && old.Mode&syscall.S_IFMT == syscall.S_IFREG {
			uid, gid = int(old.Uid), int(old.Gid)
		}
		if uid != unix.Geteuid() || gid != unix.Getegid() {
			if err := unix.Fchown(tmp.fd, uid, gid); err != nil {
				return fmt.Errorf("write %s: give it its owner: %w", t.rel, err)
			}
		}
		if err := unix.Fchmod(tmp.fd, mode&0o7777); err != nil {
			return fmt.Errorf("write %s: give it its mode: %w", t.rel, err)
		}
		if err := tmp.replace(t.dirFd, &t.dirSt, t.name); err != nil {
			return fmt.Errorf("write %s: %w", t.rel, err)
		}
		r.f.changedTarget(tl, t, g, g.state.fp.ino, fingerprintFd(tmp.fd), false)
		return nil
	})
}

// Symlink replaces the entry at p with a symlink to target, atomically.
// A target that leads out of the workspace as written (absolute, or ".."
// above the root) is refused: no link made here leads out (the mounts
// judge chains of links when they are read).
func (r *Restorer) Symlink(ctx context.Context, p, target string) error {
	return r.step(ctx, func(tl *told) error {
		t, err := r.f.resolveExact(p)
		if err != nil {
			return fmt.Errorf("make link %s: %w", p, err)
		}
		defer t.close()
		if leadsOut(t.rel, target) {
			return fmt.Errorf("make link %s: its target %q leads out of the workspace: %w", t.rel, target, unix.EPERM)
		}
		r.f.hub.sweepTemps(t.dirFd, &t.dirSt, r.f.label)
		tmp := tempName()
		key := tempKey{t.dirSt.Dev, t.dirSt.Ino, tmp}
		ts := &r.f.hub.temps
		ts.mu.Lock()
		if ts.live == nil {
			ts.live = make(map[tempKey]struct{})
		}
		ts.live[key] = struct{}{}
		ts.mu.Unlock()
		defer func() {
			ts.mu.Lock()
			delete(ts.live, key)
			ts.mu.Unlock()
		}()
		if err := unix.Symlinkat(target, t.dirFd, tmp); err != nil {
			return fmt.Errorf("make link %s: %w", t.rel, err)
		}
		g, unlock, err := r.f.lockTarget(t)
		if err != nil {
			unix.Unlinkat(t.dirFd, tmp, 0)
			return fmt.Errorf("make link %s: %w", t.rel, err)
		}
		defer unlock()
		if g.state.fp.dir {
			unix.Unlinkat(t.dirFd, tmp, 0)
			return fmt.Errorf("make link %s: %w", t.rel, unix.EISDIR)
		}
		if err := unix.Renameat(t.dirFd, tmp, t.dirFd, t.name); err != nil {
			unix.Unlinkat(t.dirFd, tmp, 0)
			return fmt.Errorf("make link %s: %w", t.rel, err)
		}
		fp, _ := fingerprintAt(t.dirFd, t.name)
		r.f.changedTarget(tl, t, g, g.state.fp.ino, fp, false)
		return nil
	})
}

// leadsOut reports whether a link at rel (inside the workspace) to target
// leads out of the workspace as written: an absolute target, or ".." that
// climbs above the root.
func leadsOut(rel, target string) bool {
	if target == "" || path.IsAbs(target) || strings.IndexByte(target, 0) >= 0 {
		return true
	}
	j := path.Join(path.Dir(rel), target)
	return j == ".." || strings.HasPrefix(j, "../")
}

// Sync makes every change made to the workspace durable (syncfs of its
// filesystem), and returns once every mount was told of them.
func (r *Restorer) Sync() error {
	r.f.hub.flush()
	fd, err := reopen(r.f.fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("sync the workspace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("sync the workspace: %w", err)
	}
	return nil
}

// fdWriter writes to a descriptor.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// sparseContent is content with holes (snapshot.SparseContent, named
// here by its methods): Size is the file's size, WriteSparse writes only
// its data, at its offsets, and checks it.
type sparseContent interface {
	Size() int64
	WriteSparse(ctx context.Context, w io.WriterAt) error
}

// fdWriterAt writes to a descriptor at an offset.
type fdWriterAt int

func (w fdWriterAt) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pwrite(int(w), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
