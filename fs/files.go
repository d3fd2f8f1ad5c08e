package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The file API: read, write and edit for a harness that serves many agent
// runs from one process, so the caller's pid says nothing about the run;
// each call names its run instead. It works on the backing folder itself,
// never through a mount (a process must not use a mount it serves), and
// through the same ledger as the mounts of the hub: the same locks, the
// same versions, the same read records. A run that reads a file here and
// writes it through a mount (or the other way round) is one actor.

// MaxFileBytes bounds a file the file API reads, edits or writes.
const MaxFileBytes = 16 << 20

// OutsideError: a path that leads out of the workspace.
type OutsideError struct{ Path string }

func (e *OutsideError) Error() string {
	return fmt.Sprintf("%s is outside the workspace.", e.Path)
}

// TooLargeError: a file over MaxFileBytes.
type TooLargeError struct {
	Path string
	Size int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes; the file API handles files up to %d bytes.", e.Path, e.Size, MaxFileBytes)
}

// NotFileError: the path holds something other than a regular file.
type NotFileError struct{ Path string }

func (e *NotFileError) Error() string { return fmt.Sprintf("%s is not a regular file.", e.Path) }

// Files reaches one workspace folder for the file API. Call Close when
// finished.
type Files struct {
	hub     *Hub
	label   string // for logs and Stale reports, e.g. "tenant/thread"
	fd      int    // O_PATH descriptor of the folder
	dev     uint64
	onStale func(Stale)
	changes *changeLog // the folder's change log (changes.go)
	watch   watcher    // WatchChanges
}

// Files opens the workspace folder dir for the file API. label names it
// in logs; onStale, if set, is told of every refused stale write.
func (h *Hub) Files(dir, label string, onStale func(Stale)) (*Files, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fs: open workspace folder %s: %w", dir, err)
	}
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fs: stat workspace folder %s: %w", dir, err)
	}
	c := h.changeLogOf(rootID{st.Dev, st.Ino})
	return &Files{hub: h, label: label, fd: fd, dev: st.Dev, onStale: onStale, changes: c}, nil
}

// Folder returns an O_PATH descriptor of the workspace folder, for reading
// it below (a checkpoint does). It stays open until Close; do not close it.
func (f *Files) Folder() int { return f.fd }

// Close releases the folder.
func (f *Files) Close() error {
	f.hub.dropChangeLog(f.changes)
	return unix.Close(f.fd)
}

// RegisterRun makes the process pid and its descendants act as run in
// every mount of the hub, from their next open on. The gateway does this
// for the commands it starts; a harness may do it for its own processes.
func (h *Hub) RegisterRun(pid int, run string) error {
	return h.actors.register(pid, run)
}

// RegisterJail makes each child of the process initPid — a command
// started by a jail's init — act in every mount of the hub as the run that
// runOf(its pid) names; a child runOf does not know acts on its own.
// runOf is called once per new thread of a command's process tree, from a
// FUSE request, and may wait a little for a command that is being
// started. Call the returned function when the jail ends.
func (h *Hub) RegisterJail(initPid int, runOf func(cmdPid int) (string, bool)) (func(), error) {
	return h.actors.registerJail(initPid, runOf)
}

// EndRun forgets run: its registered processes and its read records.
func (h *Hub) EndRun(run string) {
	h.actors.endRun(run)
	h.ledger.forgetActors(func(a Actor) bool { return a.Run == run })
}

// ReadStats tells how many read records and path states the hub holds.
func (h *Hub) ReadStats() ReadStats { return h.ledger.stats() }

// ActorOfPid returns the actor of a process, as its requests to a mount
// would be judged.
func (h *Hub) ActorOfPid(pid int) Actor { return h.actors.of(uint32(pid)) }

// target is a resolved path: a name in an open directory.
type target struct {
	dirFd int
	name  string
	rel   string // the path as reported, inside the workspace
	key   pathKey
	dirSt syscall.Stat_t
	// root says the path is the workspace's root itself (resolveRoot):
	// dirFd is then the root (a descriptor of its own), name is "" and
	// key is the zero key; nothing is keyed or locked for it.
	root bool
}

func (t *target) close() { unix.Close(t.dirFd) }

// maxLinks bounds the symlinks followed to reach one file.
const maxLinks = 40

// How resolveAs finds a path.
type resolveFlags int

const (
	// makeDirs makes the missing folders on the way.
	makeDirs resolveFlags = 1 << iota
	// followLast follows a link as the last component too, inside the
	// workspace; without it the target is the link itself.
	followLast
	// resolveRoot lets the path name the workspace's root (".", "a/..",
	// or a link to it): a target with root set. Without it the root is
	// a *NotFileError.
	resolveRoot
)

// resolve finds the file p names: a path inside the workspace, relative
// to its root. Links in the directories are followed as the kernel would,
// never out of the folder; a link as the last component is followed
// inside the folder too, so that the key is the real file's. With mkdir,
// missing directories are made.
func (f *Files) resolve(p string, mkdir bool) (*target, error) {
	how := followLast
	if mkdir {
		how |= makeDirs
	}
	return f.resolveAs(p, how)
}

// resolveAs is resolve with its choices spelled out (resolveFlags).
func (f *Files) resolveAs(p string, how resolveFlags) (*target, error) {
	shown := p
	for range maxLinks {
		if strings.IndexByte(p, 0) >= 0 || path.IsAbs(p) {
			return nil, &OutsideError{Path: shown}
		}
		clean := path.Clean(p)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, &OutsideError{Path: shown}
		}
		if clean == "." {
			if how&resolveRoot == 0 {
				return nil, &NotFileError{Path: shown}
			}
			fd, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", shown, err)
			}
			t := &target{dirFd: fd, rel: ".", root: true}
			if err := fstat(fd, &t.dirSt); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("%s: %w", shown, err)
			}
			return t, nil
		}
		dir, name := path.Split(clean)
		dirFd, err := f.openDir(dir, how&makeDirs != 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
				return nil, &OutsideError{Path: shown}
			}
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
		var st syscall.Stat_t
		err = fstatat(dirFd, name, &st)
		if err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK && how&followLast != 0 {
			link, rerr := readlinkAt(dirFd, name)
			unix.Close(dirFd)
			if rerr != nil {
				return nil, fmt.Errorf("%s: %w", shown, rerr)
			}
			if path.IsAbs(link) {
				return nil, &OutsideError{Path: shown}
			}
			p = path.Join(dir, link)
			continue
		}
		if err != nil && err != unix.ENOENT {
			unix.Close(dirFd)
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
		t := &target{dirFd: dirFd, name: name, rel: clean}
		gen, err := statGen(dirFd, "", &t.dirSt)
		if err != nil {
			unix.Close(dirFd)
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
		t.key = pathKey{dev: t.dirSt.Dev, dir: t.dirSt.Ino, gen: gen, name: name}
		return t, nil
	}
	return nil, fmt.Errorf("%s: %w", shown, unix.ELOOP)
}

// openDir opens the directory dir (relative, "/"-separated, maybe "")
// below the folder, making what is missing if mkdir is set.
func (f *Files) openDir(dir string, mkdir bool) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	dir = strings.Trim(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := openat2Retry(f.fd, dir, &how)
	if err != unix.ENOENT || !mkdir {
		return fd, err
	}
	// Make the missing directories one by one, each below the last one
	// opened, owned like the directory it is made in.
	cur, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(dir, "/") {
		next, err := openat2Retry(cur, c, &how)
		if err == unix.ENOENT {
			var st syscall.Stat_t
			if err = fstat(cur, &st); err == nil {
				err = unix.Mkdirat(cur, c, 0o755)
				if err == nil {
					f.trackMade(cur, c)
					// The new folder's entry survives a power
					// loss, as the file written in it will.
					err = syncDir(cur)
				}
				if err == nil || err == unix.EEXIST {
					next, err = openat2Retry(cur, c, &how)
					if err == nil {
						chownLike(next, &st)
					}
				}
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func openat2Retry(dirfd int, p string, how *unix.OpenHow) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, p, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// chownLike gives fd the owner of the directory it was made in (st): the
// daemon runs as root, the workspace belongs to its user.
func chownLike(fd int, dir *syscall.Stat_t) {
	if int(dir.Uid) != unix.Geteuid() || int(dir.Gid) != unix.Getegid() {
		fchown(fd, int(dir.Uid), int(dir.Gid))
	}
}

// lockTarget takes the lock of t and brings its version up to date.
func (f *Files) lockTarget(t *target) (guarded, func(), error) {
	g, unlock, err := f.hub.ledger.take(t.key, t.dirFd, t.name)
	if err != nil {
		return guarded{}, nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	if g.moved {
		f.track(t, g.state.fp.dir)
		f.changedAt(Changed, t.rel, g.state.soleWriter(), g.state.version)
	}
	return g, unlock, nil
}

// refuseIfStale is the file API's refusal: an error, logged and reported
// once per stale version.
func (f *Files) refuseIfStale(op string, a Actor, t *target, g guarded) error {
	s := Stale{Mount: f.label, Op: op, Path: t.rel, Actor: a}
	if f.hub.ledger.refuseStale(f.hub.log.With("workspace", f.label), f.onStale, s, g) {
		return &StaleError{Path: t.rel, Actor: a}
	}
	return nil
}

// Read returns the content of the file at p and its version, and records
// that a read it.
func (f *Files) Read(ctx context.Context, a Actor, p string) ([]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	t, err := f.resolve(p, false)
	if err != nil {
		return nil, 0, err
	}
	defer t.close()
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return nil, 0, err
	}
	defer unlock()
	data, err := f.readAll(t, unix.O_RDONLY)
	if err != nil {
		return nil, 0, err
	}
	f.hub.ledger.read(a, g.key, g.state)
	return data, g.state.version, nil
}

// readAll reads the regular file t; a missing file is an iofs.ErrNotExist.
func (f *Files) readAll(t *target, flags int) ([]byte, error) {
	fd, err := unix.Openat(t.dirFd, t.name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil, fmt.Errorf("%s: %w", t.rel, iofs.ErrNotExist)
		}
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	defer unix.Close(fd)
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", t.rel, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, &NotFileError{Path: t.rel}
	}
	if st.Size > MaxFileBytes {
		return nil, &TooLargeError{Path: t.rel, Size: st.Size}
	}
	data := make([]byte, 0, st.Size)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.rel, err)
		}
		if n == 0 {
			return data, nil
		}
		if len(data)+n > MaxFileBytes {
			return nil, &TooLargeError{Path: t.rel, Size: int64(len(data) + n)}
		}
		data = append(data, buf[:n]...)
	}
}

// Write replaces the content of the file at p (made, with its missing
// directories, if need be) and returns its new version. Over an existing
// file, text keeps the file's line endings and BOM. Refused with a
// *StaleError if a read the file before its last change.
func (f *Files) Write(ctx context.Context, a Actor, p string, content []byte) (uint64, error) {
	v, err := f.write(ctx, a, p, content)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return v, err
}

func (f *Files) write(ctx context.Context, a Actor, p string, content []byte) (v uint64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(content) > MaxFileBytes {
		return 0, &TooLargeError{Path: p, Size: int64(len(content))}
	}
	defer f.changes.enter()()
	t, err := f.resolve(p, true)
	if err != nil {
		return 0, spaceError(p, err)
	}
	defer t.close()
	defer func() { err = spaceError(t.rel, err) }()
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if err := f.refuseIfStale("write", a, t, g); err != nil {
		return 0, err
	}
	created := g.state.fp.ino == 0
	if !created {
		old, err := f.readAll(t, unix.O_RDONLY)
		if err != nil {
			return 0, err
		}
		content = restyle(old, content)
	}
	return f.store(a, t, g, content, created)
}

// Edit replaces old with new in the file at p: its one occurrence, or all
// of them if all is set. It returns the new version and how many
// occurrences it replaced.
func (f *Files) Edit(ctx context.Context, a Actor, p, old, new string, all bool) (uint64, int, error) {
	v, n, err := f.edit(ctx, a, p, old, new, all)
	// Once it answered, every mount shows the change.
	f.hub.flush()
	return v, n, err
}

func (f *Files) edit(ctx context.Context, a Actor, p, old, new string, all bool) (v uint64, n int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if old == "" {
		return 0, 0, errors.New("the text to replace is empty")
	}
	if old == new {
		return 0, 0, errors.New("the text to replace and its replacement are the same")
	}
	defer f.changes.enter()()
	t, err := f.resolve(p, false)
	if err != nil {
		return 0, 0, err
	}
	defer t.close()
	defer func() { err = spaceError(t.rel, err) }()
	g, unlock, err := f.lockTarget(t)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	if err := f.refuseIfStale("edit", a, t, g); err != nil {
		return 0, 0, err
	}
	content, err := f.readAll(t, unix.O_RDONLY)
	if err != nil {
		return 0, 0, err
	}
	edited, n, err := replaceText(t.rel, content, old, new, all)
	if err != nil {
		return 0, 0, err
	}
	if len(edited) > MaxFileBytes {
		return 0, 0, &TooLargeError{Path: t.rel, Size: int64(len(edited))}
	}
	v, err = f.store(a, t, g, edited, false)
	return v, n, err
}

// store makes content the file t, durably and atomically, and records the
// modification by a and tells the mounts. t's lock is held.
//
// The content goes to a new file in the same folder, which takes the old
// file's mode and owner and is fsync'ed, then renamed over the old one,
// and the folder is fsync'ed: once store returns, the file holds the whole
// new content across a crash of the daemon or of the machine, and until
// the rename it holds the whole old content. A write that fails (a full
// disk, a quota) leaves the old file as it was and its version unmoved.
//
// A file with several hard links is the exception: a rename would cut it
// from its other names, so it is written in place (after reserving its
// blocks, so a full disk refuses it before anything is overwritten) and
// fsync'ed; a crash in the middle of that write may leave it cut.
func (f *Files) store(a Actor, t *target, g guarded, content []byte, created bool) (uint64, error) {
	var st syscall.Stat_t
	old := &st
	if err := fstatat(t.dirFd, t.name, old); err != nil {
		if err != unix.ENOENT {
			return 0, fmt.Errorf("%s: %w", t.rel, err)
		}
		old = nil
	} else if old.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, &NotFileError{Path: t.rel}
	} else if old.Nlink > 1 {
		return f.storeInPlace(a, t, g, int64(len(content)), nil, func(fd int) error { return pwriteAll(fd, content) })
	}
	f.hub.sweepTemps(t.dirFd, &t.dirSt, f.label)
	tmp, err := f.hub.temps.newTemp(t.dirFd, &t.dirSt)
	if err != nil {
		return 0, fmt.Errorf("%s: make a temporary file: %w", t.rel, err)
	}
	defer tmp.discard()
	if err := pwriteAll(tmp.fd, content); err != nil {
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	return f.commit(a, t, g, tmp, old, nil)
}

// commit makes tmp, which holds the new content, the file t, atomically
// and durably, records the modification by a (as good as a read: a knows
// the whole content) and tells the mounts. old is what t holds (nil:
// nothing). The file gets old's owner and mode, or, new, its folder's
// owner and mode 0644; mode, if set, is its mode either way. t's lock is
// held; nothing is changed at t until the rename.
func (f *Files) commit(a Actor, t *target, g guarded, tmp *tempFile, old *syscall.Stat_t, mode *uint32) (uint64, error) {
	uid, gid, perm := int(t.dirSt.Uid), int(t.dirSt.Gid), uint32(0o644)
	if old != nil {
		uid, gid, perm = int(old.Uid), int(old.Gid), old.Mode&0o7777
	}
	if mode != nil {
		perm = *mode & 0o7777
	}
	// Owner before mode: a chown clears the set-id bits.
	if uid != unix.Geteuid() || gid != unix.Getegid() {
		if err := unix.Fchown(tmp.fd, uid, gid); err != nil {
			return 0, fmt.Errorf("%s: give the new content its owner: %w", t.rel, err)
		}
	}
	if err := unix.Fchmod(tmp.fd, perm); err != nil {
		return 0, fmt.Errorf("%s: give the new content its mode: %w", t.rel, err)
	}
	if err := fsyncRetry(tmp.fd); err != nil {
		return 0, fmt.Errorf("%s: fsync: %w", t.rel, err)
	}
	if err := tmp.replace(t.dirFd, &t.dirSt, t.name); err != nil {
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	// From here the new content is the file: the version moves whatever
	// the folder's fsync says.
	v := f.hub.ledger.wrote(a, g.key, g.state, fingerprintFd(tmp.fd))
	var oldIno uint64
	if old != nil {
		oldIno = old.Ino
	} else {
		var st syscall.Stat_t
		if fstat(tmp.fd, &st) == nil {
			oldIno = st.Ino
		}
	}
	// The name now leads to another inode: the mounts look it up again.
	f.hub.changed(t.dirSt.Dev, oldIno, t.dirSt.Ino, t.name)
	f.track(t, false)
	kind := Changed
	if old == nil {
		kind = Created
	}
	f.changedAt(kind, t.rel, a, v)
	if err := syncDir(t.dirFd); err != nil {
		return 0, fmt.Errorf("%s: fsync its folder: %w", t.rel, err)
	}
	return v, nil
}

// storeInPlace is store for a file with several hard links: its inode
// keeps the new content, size bytes that fill writes from offset 0; mode,
// if set, becomes its mode. t's lock is held.
func (f *Files) storeInPlace(a Actor, t *target, g guarded, size int64, mode *uint32, fill func(fd int) error) (uint64, error) {
	fd, err := unix.Openat(t.dirFd, t.name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	defer unix.Close(fd)
	var st syscall.Stat_t
	if err := fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, &NotFileError{Path: t.rel}
	}
	// The blocks first: a full disk refuses the write here, with the old
	// content whole. A filesystem without fallocate goes on without.
	if size > 0 {
		err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, size)
		if err != nil && err != unix.EOPNOTSUPP && err != unix.ENOSYS {
			return 0, fmt.Errorf("%s: reserve space: %w", t.rel, err)
		}
	}
	err = fill(fd)
	if err == nil {
		err = unix.Ftruncate(fd, size)
	}
	if err == nil && mode != nil {
		err = unix.Fchmod(fd, *mode&0o7777)
	}
	if err == nil {
		err = fsyncRetry(fd)
	}
	// The content changed under every name of the file.
	f.changes.lose("a file with several names changed")
	if err != nil {
		// Part of the old content may be overwritten: the version moves.
		f.hub.ledger.modified(a, g.key, g.state, fingerprintFd(fd))
		f.hub.changed(t.dirSt.Dev, st.Ino, t.dirSt.Ino, t.name)
		return 0, fmt.Errorf("%s: %w", t.rel, err)
	}
	// The run knows the whole content it left: as good as a read.
	v := f.hub.ledger.wrote(a, g.key, g.state, fingerprintFd(fd))
	f.hub.changed(t.dirSt.Dev, st.Ino, t.dirSt.Ino, t.name)
	return v, nil
}
