package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"warren/internal/mountinfo"
)

// A jail's init is born in a mount namespace of its own (CLONE_NEWNS), and
// the kernel makes that namespace as a copy of the one it is forked from,
// every mount of it: forked from the daemon's, with 10,000 threads bound,
// that is 10,000 FUSE binds under the data folder's mnt/ copied at the
// clone and torn down again when the init detaches the host's root, a cost
// linear in the mounts on every jail's start.
//
// A Base is the namespace jails are forked from instead, made once: a
// private copy of the daemon's namespace from which every mount a jail
// does not need before its pivot is detached. What stays is the root, the
// host folders the jails bind read-only (with their mounts: the binds are
// recursive), /proc and /dev, and the mounts that hold the init's binary
// and /tmp (where the init puts its new root): a few dozen mounts,
// whatever the daemon serves. Start forks the init from a thread that
// entered the base (startIn), and hands it the workspace as a detached
// mount (open_tree) made in the daemon's own namespace, where the thread's
// mount is: the base has none. So it does an image's root and a home
// (image_linux.go), which live in the data folder the base hides.
//
// What the base promises:
//
//   - It holds nothing a jail did not see before: it is a subset of the
//     daemon's namespace, and a jail still sees of it only what buildRoot
//     binds.
//   - No mount event crosses between it and the host: every mount of it is
//     private (MS_PRIVATE|MS_REC) before anything is detached, so the
//     detaches stay in it, and nothing mounted on the host later (a
//     thread's mount, an inspection mount) appears in it.
//   - It keeps no mount of a thread, nor any other FUSE mount outside the
//     kept folders, alive: they are detached when it is made, and later
//     ones never come in. A thread's unmount on the host ends its mount.
//     Detaching asks no filesystem anything (MNT_DETACH, a path walk that
//     ends at the mount's root), so a hung FUSE server does not hang it.
//   - It never holds a mount under BaseConfig.Hide (the daemon's mount
//     trees), even inside a kept folder: NewBase fails rather than keep one.

// BaseConfig says what a Base keeps.
type BaseConfig struct {
	// ReadOnly are the host folders the jails started from the base bind
	// (Config.ReadOnly): they are kept with every mount under them. nil
	// means DefaultReadOnly(). A jail that binds another folder is refused.
	ReadOnly []string
	// Binary is the program the jails run as their init (Config.Binary):
	// the mounts that hold it are kept. "" means this very binary, through
	// /proc/self/exe. A jail with another binary is refused.
	Binary string
	// Hide are folders no mount of the base may lie in, kept folder or
	// not: the daemon's mount trees (the data folder's mnt/, the
	// workspaces).
	Hide []string
}

// Base is the mount namespace jails are forked from (see above). NewBase
// makes one; Close lets it go (the jails started from it are not
// affected: each has a namespace of its own).
type Base struct {
	readOnly []string // as in BaseConfig, defaulted
	binary   string   // as in BaseConfig
	mounts   int      // how many mounts it holds, for Mounts

	// mu is held for reading while a start enters fd, and for writing by
	// Close.
	mu sync.RWMutex
	fd int // the namespace (/proc/thread-self/ns/mnt of its maker); -1 once closed; guarded by mu
}

// errBaseClosed is a Start's from a Base that was closed.
var errBaseClosed = errors.New("jail: the base namespace is closed")

// NewBase makes a Base. It needs the privileges a jail needs (root).
func NewBase(cfg BaseConfig) (*Base, error) {
	if cfg.ReadOnly == nil {
		cfg.ReadOnly = DefaultReadOnly()
	}
	plan, err := planBase(cfg)
	if err != nil {
		return nil, err
	}
	var fd, mounts int
	// The thread goes into a mount namespace of its own, and never back.
	err = onDiscardedThread(func() (err error) {
		fd, mounts, err = plan.make()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jail: make the base namespace: %w", err)
	}
	return &Base{readOnly: slices.Clone(cfg.ReadOnly), binary: cfg.Binary, mounts: mounts, fd: fd}, nil
}

// onDiscardedThread runs fn on a locked thread that ends when fn returns
// (its goroutine returns locked, and the runtime ends the thread rather
// than run other goroutines on it): fn may leave it in another mount
// namespace, with a filesystem context of its own. Never on the main
// thread: the runtime never ends it (it parks it, for good, in whatever
// namespace fn left it), and /proc/self is its view, which the daemon
// reads (/proc/self/mountinfo). A goroutine that finds itself there holds
// the main thread, so that the next goroutine cannot be given it, and
// tries again from another (as fs's onThreadWithOwnFiles does).
func onDiscardedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- onDiscardedThread(fn)
			runtime.UnlockOSThread()
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Mounts returns how many mounts the base holds: about what every jail's
// namespace is copied from.
func (b *Base) Mounts() int { return b.mounts }

// Close lets the base go. A Start with it fails afterwards.
func (b *Base) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fd < 0 {
		return nil
	}
	err := unix.Close(b.fd)
	b.fd = -1
	if err != nil {
		return fmt.Errorf("jail: close the base namespace: %w", err)
	}
	return nil
}

// fits says why cfg's jail cannot start from the base, or nil.
func (b *Base) fits(cfg Config) error {
	for _, dir := range cfg.ReadOnly {
		if cfg.Image != nil {
			break // an image's jail binds none of them
		}
		if !slices.Contains(b.readOnly, dir) {
			return fmt.Errorf("jail: %s is not among the base namespace's read-only folders", dir)
		}
	}
	if cfg.Binary != b.binary {
		return fmt.Errorf("jail: the binary %q is not the base namespace's (%q)", cfg.Binary, b.binary)
	}
	return nil
}

// startIn runs start (a fork) on a thread in the base's namespace: the
// child's CLONE_NEWNS then copies the base, not the daemon's namespace.
// The thread is not given back to the runtime.
func (b *Base) startIn(start func() error) error {
	return onDiscardedThread(func() error { return b.enter(start) })
}

// enter moves the calling (locked) thread into the base and runs start.
func (b *Base) enter(start func() error) error {
	// setns into a mount namespace wants a filesystem context that no
	// other thread shares; Go's threads share one.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("jail: unshare the thread's filesystem context: %w", err)
	}
	if err := b.setns(); err != nil {
		return err
	}
	// The thread holds the namespace now: a Close from here on does not
	// take it away.
	return start()
}

// setns moves the calling thread into the base, unless it is closed.
func (b *Base) setns() error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.fd < 0 {
		return errBaseClosed
	}
	if err := unix.Setns(b.fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("jail: enter the base namespace: %w", err)
	}
	return nil
}

// basePlan is what a base keeps, resolved on the host.
type basePlan struct {
	// trees are folders kept with every mount in them.
	trees []string
	// paths are folders whose mounts are kept (the mount that holds each,
	// and those on the way), but not the mounts inside them.
	paths []string
	// hide are folders no kept mount may lie in.
	hide []string
	// reach are paths that must resolve in the base, checked once it is
	// made.
	reach []string
}

// planBase resolves cfg's folders on the host: mountinfo names mount
// points by their real paths.
func planBase(cfg BaseConfig) (basePlan, error) {
	var p basePlan
	for _, dir := range append(slices.Clone(cfg.ReadOnly), "/proc", "/dev") {
		if !filepath.IsAbs(dir) {
			return p, fmt.Errorf("jail: read-only folder %q is not an absolute path", dir)
		}
		real, err := filepath.EvalSymlinks(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue // a missing folder is not bound (bindReadOnly)
		}
		if err != nil {
			return p, fmt.Errorf("jail: resolve %s: %w", dir, err)
		}
		p.trees = append(p.trees, real)
	}
	// The init's new root goes over /tmp; the devices buildDev binds.
	p.paths = append(p.paths, "/tmp")
	p.reach = append(p.reach, "/tmp", "/proc/self/fd", "/dev/null")
	if cfg.Binary != "" {
		if !filepath.IsAbs(cfg.Binary) {
			return p, fmt.Errorf("jail: binary %q is not an absolute path", cfg.Binary)
		}
		real, err := filepath.EvalSymlinks(cfg.Binary)
		if err != nil {
			return p, fmt.Errorf("jail: resolve the binary: %w", err)
		}
		p.paths = append(p.paths, real)
		p.reach = append(p.reach, real)
	}
	for _, dir := range cfg.Hide {
		if !filepath.IsAbs(dir) {
			return p, fmt.Errorf("jail: hidden folder %q is not an absolute path", dir)
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return p, fmt.Errorf("jail: resolve the hidden folder %s: %w", dir, err)
		}
		if real == "/" {
			return p, errors.New("jail: the root cannot be hidden from the base namespace")
		}
		p.hide = append(p.hide, real)
	}
	return p, nil
}

// maxDetachPasses bounds the passes over the base's mounts: a pass
// detaches the topmost mount at each path, and one stacked under it comes
// to the top for the next.
const maxDetachPasses = 8

// make turns the calling thread's namespace into the base and returns a
// descriptor of it and how many mounts it holds. The thread is locked and
// never goes back to the runtime, whatever happens.
func (p basePlan) make() (int, int, error) {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return -1, 0, fmt.Errorf("unshare: %w", err)
	}
	// Before anything is detached: a detach in a shared mount would
	// propagate to the host's peers of it.
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return -1, 0, fmt.Errorf("make every mount private: %w", err)
	}
	var mounts []mountEntry
	for pass := 0; ; pass++ {
		var err error
		if mounts, err = readMountinfo("/proc/thread-self/mountinfo"); err != nil {
			return -1, 0, err
		}
		roots := p.detachRoots(mounts)
		if len(roots) == 0 {
			break
		}
		if pass == maxDetachPasses {
			if hidden := p.hidden(mounts); len(hidden) > 0 {
				return -1, 0, fmt.Errorf("cannot detach %s", strings.Join(hidden, ", "))
			}
			// Others stay (a mount point whose folder was deleted cannot be
			// named): they cost a copy each, and are never bound.
			break
		}
		for _, dir := range roots {
			// The walk to dir crosses only kept mounts (its parent is
			// one) and ends at the root of the one detached: no
			// request to it. UMOUNT_NOFOLLOW: a link swapped in on the
			// way would detach something else.
			err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return -1, 0, fmt.Errorf("detach %s: %w", dir, err)
			}
		}
	}
	for _, path := range p.reach {
		if err := unix.Access(path, unix.F_OK); err != nil {
			return -1, 0, fmt.Errorf("%s is not reachable in it: %w", path, err)
		}
	}
	fd, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("open it: %w", err)
	}
	return fd, len(mounts), nil
}

// keeps says whether the base keeps a mount at dir.
func (p basePlan) keeps(dir string) bool {
	if dir == "/" {
		return true
	}
	if slices.ContainsFunc(p.hide, func(h string) bool { return within(dir, h) }) {
		return false
	}
	for _, t := range p.trees {
		if within(dir, t) || within(t, dir) {
			return true
		}
	}
	for _, path := range p.paths {
		if within(path, dir) {
			return true
		}
	}
	return false
}

// detachRoots returns the mount points of the mounts to detach whose
// parent stays: detaching one takes every mount under it along.
func (p basePlan) detachRoots(mounts []mountEntry) []string {
	gone := make(map[uint64]bool, len(mounts))
	for _, m := range mounts {
		if !p.keeps(m.dir) {
			gone[m.id] = true
		}
	}
	var roots []string
	for _, m := range mounts {
		if gone[m.id] && !gone[m.parent] {
			roots = append(roots, m.dir)
		}
	}
	slices.Sort(roots)
	return slices.Compact(roots)
}

// hidden returns the mount points in mounts under p.hide.
func (p basePlan) hidden(mounts []mountEntry) []string {
	var out []string
	for _, m := range mounts {
		if slices.ContainsFunc(p.hide, func(h string) bool { return within(m.dir, h) }) {
			out = append(out, m.dir)
		}
	}
	return out
}

// within says whether path is dir or lies under it (both clean).
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// mountEntry is one line of a mountinfo file.
type mountEntry struct {
	id, parent uint64
	dir        string // the mount point
}

// readMountinfo reads a mountinfo file (proc(5)).
func readMountinfo(path string) ([]mountEntry, error) {
	var out []mountEntry
	if err := mountinfo.Scan(path, func(e mountinfo.Entry) bool {
		out = append(out, mountEntry{id: e.ID, parent: e.Parent, dir: e.Path})
		return true
	}); err != nil {
		return nil, fmt.Errorf("read the mounts: %w", err)
	}
	return out, nil
}

// cloneWorkspace returns a detached bind of the folder dir, as the
// MS_BIND of buildRoot makes it: the mount at dir alone, not the mounts
// under it. The walk to dir ends at the root of the thread's mount and
// asks it nothing, and the type comes from what the kernel has
// (AT_STATX_DONT_SYNC): the daemon makes no request to its own mounts
// (fs/doc.go).
func cloneWorkspace(dir string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("jail: clone the workspace %s: %w", dir, err)
	}
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("jail: the workspace %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, fmt.Errorf("jail: the workspace %s is not a folder", dir)
	}
	return fd, nil
}
