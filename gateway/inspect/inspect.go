package inspect

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// Threads is what the room calls of the threads (the threads room will
// have these methods; package gateway adapts the daemon to it until then).
type Threads interface {
	// Lock takes thread k's lock.
	Lock(ctx context.Context, k meta.ThreadKey) (unlock func(), err error)
	// BindLocked binds k if it is not bound; Lock(k) is held.
	BindLocked(ctx context.Context, k meta.ThreadKey, s *meta.Settings) (meta.Binding, error)
	// RootOf is the workspace folder of b that the daemon trusts.
	RootOf(b meta.Binding) (string, error)
	// Mount serves root for k at mountPath, onto target (which mountPath
	// then only names).
	Mount(ctx context.Context, k meta.ThreadKey, root, mountPath string, readOnly bool, target *fs.Target) (io.Closer, error)
}

// Config is what the inspection mounts need of the daemon.
type Config struct {
	Store   meta.Store
	Logger  hclog.Logger
	Threads Threads
	// DataDir and WorkspacesDir are the daemon's data and workspaces
	// folders, links resolved: no inspection mount lies in either. New
	// takes their identities (device and inode), which the checks compare
	// on descriptors.
	DataDir, WorkspacesDir string
	// UnmountDrain bounds how long Unmount waits, outside every lock, for
	// a mount it took out of the tree to stop serving; 0 is
	// DefaultUnmountDrain.
	UnmountDrain time.Duration
}

// DefaultUnmountDrain is Config.UnmountDrain's default.
const DefaultUnmountDrain = 5 * time.Second

// Inspections is the daemon's inspection mounts: their records in the
// store and the mounts it serves. New makes one; it holds no goroutine.
type Inspections struct {
	// Set by New, never changed.
	store   meta.Store
	log     hclog.Logger
	threads Threads
	dataDir string
	wsReal  string
	// dataID and wsID are the identities of dataDir and wsReal: an
	// inspection folder is checked on descriptors, not by its path.
	dataID, wsID fileID
	drainWait    time.Duration

	// set is the mounts by path, under its own lock.
	set inspectionSet
}

// New checks the data and workspaces folders and returns the room, with
// no mount yet (Restore serves the recorded ones).
func New(cfg Config) (*Inspections, error) {
	in := &Inspections{
		store:     cfg.Store,
		log:       cfg.Logger,
		threads:   cfg.Threads,
		dataDir:   cfg.DataDir,
		wsReal:    cfg.WorkspacesDir,
		drainWait: cfg.UnmountDrain,
		set:       inspectionSet{mounts: make(map[string]*inspectionMount)},
	}
	if in.log == nil {
		in.log = hclog.NewNullLogger()
	}
	if in.drainWait <= 0 {
		in.drainWait = DefaultUnmountDrain
	}
	var err error
	if in.dataID, err = statID(in.dataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if in.wsID, err = statID(in.wsReal); err != nil {
		return nil, fmt.Errorf("workspaces folder: %w", err)
	}
	return in, nil
}

// inspectionSet is the inspection mounts by path, including ones being
// made (mount nil, pending true) and ones that failed at start.
type inspectionSet struct {
	mu sync.Mutex
	// closed is set by Close: no path is reserved after it.
	closed bool
	// drained is set once Drain emptied the set (the daemon's unmount of
	// everything): no mount is put back after it.
	drained bool
	mounts  map[string]*inspectionMount
}

// inspectionMount is the in-memory state of one inspection mount.
type inspectionMount struct {
	key     meta.ThreadKey
	mount   io.Closer // nil while pending, or when mounting failed at start
	pending bool      // reserved by a request that is mounting it now
	err     error
}

// get returns the inspection mount at path, or nil.
func (is *inspectionSet) get(path string) *inspectionMount {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.mounts[path]
}

// reserve claims path for a mount being made, refusing a path that is
// served already, or that lies inside or around one, and every path once
// the gateway is closing.
func (is *inspectionSet) reserve(path string, k meta.ThreadKey) error {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.closed {
		return api.ErrClosed
	}
	for p := range is.mounts {
		if p == path || within(p, path) || within(path, p) {
			return fmt.Errorf("%w: %s is inside or around the inspection mount %s", api.ErrConflict, path, p)
		}
	}
	is.mounts[path] = &inspectionMount{key: k, pending: true}
	return nil
}

// fill makes the reservation of path a mount, m; it refuses with
// ErrClosed once the gateway is closing, and then drops the reservation:
// the caller unmounts m.
func (is *inspectionSet) fill(path string, m io.Closer) error {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.closed {
		if im := is.mounts[path]; im != nil && im.pending {
			delete(is.mounts, path)
		}
		return api.ErrClosed
	}
	is.mounts[path] = &inspectionMount{key: is.mounts[path].key, mount: m}
	return nil
}

// unreserve drops the reservation of path, if it is still one.
func (is *inspectionSet) unreserve(path string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if im := is.mounts[path]; im != nil && im.pending {
		delete(is.mounts, path)
	}
}

// put keeps im at path: one restored at start, or one whose unmount
// failed. It says false once Drain ran, whose caller would never see it.
func (is *inspectionSet) put(path string, im *inspectionMount) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.drained {
		return false
	}
	is.mounts[path] = im
	return true
}

// take removes the inspection mount at path, if it belongs to k and is
// not being made, and returns it (nil if not).
func (is *inspectionSet) take(path string, k meta.ThreadKey) *inspectionMount {
	is.mu.Lock()
	defer is.mu.Unlock()
	im := is.mounts[path]
	if im == nil || im.key != k || im.pending {
		return nil
	}
	delete(is.mounts, path)
	return im
}

// Close refuses new inspection mounts from now on: a request under way
// is refused (api.ErrClosed) where it would add one, and undoes it.
func (in *Inspections) Close() {
	is := &in.set
	is.mu.Lock()
	defer is.mu.Unlock()
	is.closed = true
}

// Drain empties the set but for the reservations (their requests see
// closed and undo them), refuses mounts put back from now on, and returns
// the mounts it held, by path, for the caller to unmount (the daemon's
// stop, with its threads' mounts). The records stay, so that the next
// start serves the mounts again.
func (in *Inspections) Drain() map[string]io.Closer {
	is := &in.set
	is.mu.Lock()
	defer is.mu.Unlock()
	is.closed, is.drained = true, true
	out := make(map[string]io.Closer)
	for p, im := range is.mounts {
		if im.mount != nil {
			out[p] = im.mount
		}
		if !im.pending {
			delete(is.mounts, p)
		}
	}
	return out
}

// Mount serves thread (req.Tenant, req.Thread)'s workspace a second time
// at req.Path, binding the thread first if it is not bound. owner is the
// uid the mount is made for (the API's peer): unless it is root, req.Path
// must belong to it, so a caller cannot cover a folder of someone else.
//
// The folder is resolved once without following links, checked on its
// descriptor, and the mount is made onto that descriptor
// (dir_linux.go): a link swapped into a parent folder meanwhile changes
// nothing. A path through a link is refused.
func (in *Inspections) Mount(ctx context.Context, req api.MountRequest, owner uint32) (api.MountInfo, error) {
	k, err := call.ThreadKey(req.Tenant, req.Thread)
	if err != nil {
		return api.MountInfo{}, err
	}
	if err := call.CheckPath("path", req.Path); err != nil {
		return api.MountInfo{}, err
	}
	dirFd, path, err := in.openInspectionDir(req.Path, owner)
	if err != nil {
		in.log.Warn("refused: inspection mount", "tenant", k.Tenant, "thread", k.Thread, "path", req.Path, "uid", owner, "error", err)
		return api.MountInfo{}, fmt.Errorf("mount %s for %s: %w", req.Path, call.KeyName(k), err)
	}
	defer unix.Close(dirFd)
	if err := in.set.reserve(path, k); err != nil {
		in.log.Warn("refused: inspection mount", "tenant", k.Tenant, "thread", k.Thread, "path", path, "uid", owner, "error", err)
		return api.MountInfo{}, fmt.Errorf("mount %s for %s: %w", path, call.KeyName(k), err)
	}
	reserved := true
	defer func() {
		if reserved {
			in.set.unreserve(path)
		}
	}()

	unlock, err := in.threads.Lock(ctx, k)
	if err != nil {
		return api.MountInfo{}, fmt.Errorf("mount %s for %s: %w", path, call.KeyName(k), err)
	}
	defer unlock()
	b, err := in.threads.BindLocked(ctx, k, nil)
	if err != nil {
		return api.MountInfo{}, fmt.Errorf("mount %s: %w", path, err)
	}

	root, err := in.threads.RootOf(b)
	if err != nil {
		return api.MountInfo{}, err
	}
	m, err := in.threads.Mount(ctx, k, root, path, !req.Writable, &fs.Target{Fd: dirFd})
	if err != nil {
		return api.MountInfo{}, fmt.Errorf("inspection %w", err)
	}
	rec, err := in.store.PutInspectionMount(ctx, meta.InspectionMount{
		ThreadKey: k,
		Path:      path,
		Writable:  req.Writable,
		Owner:     owner,
		MadeAt:    time.Now().UTC(),
	})
	if err != nil {
		if cerr := m.Close(); cerr != nil {
			in.log.Error("undo inspection mount", "path", path, "error", cerr)
		}
		return api.MountInfo{}, fmt.Errorf("mount %s: write record: %w", path, err)
	}

	if err := in.set.fill(path, m); err != nil {
		reserved = false
		// Drain did not see this mount; take it down here. The record
		// stays, so the next start serves it again.
		if cerr := m.Close(); cerr != nil {
			in.log.Error("unmount at shutdown", "path", path, "error", cerr)
		}
		return api.MountInfo{}, fmt.Errorf("mount %s: %w", path, err)
	}
	reserved = false
	in.log.Info("inspection mount made", "tenant", k.Tenant, "thread", k.Thread, "path", path, "writable", req.Writable, "uid", owner)
	return api.MountInfo{InspectionMount: rec, Mounted: true}, nil
}

// within reports whether path lies strictly below dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Unmount takes down the inspection mount known by path and forgets it.
// path only names the mount (as it was recorded): the mount is found by
// its own descriptor, wherever its folder is now, and nothing else is
// unmounted. It returns once the mount is gone from the mount table;
// inUse is true when, after Config.UnmountDrain, it still serves
// processes that hold files or their working folder in it (it stops when
// they let go). The thread lock is held only while the mount is
// detached, which never waits for the filesystem.
func (in *Inspections) Unmount(ctx context.Context, path string) (inUse bool, err error) {
	if err := call.CheckPath("path", path); err != nil {
		return false, err
	}
	if !filepath.IsAbs(path) {
		return false, fmt.Errorf("%w: %s is not an absolute path", api.ErrInvalid, call.Quote(path))
	}
	path = filepath.Clean(path)
	im := in.set.get(path)
	if im == nil {
		in.log.Warn("refused: no inspection mount", "path", path)
		return false, fmt.Errorf("unmount %s: %w: no inspection mount there", path, api.ErrNotFound)
	}
	if im.pending {
		return false, fmt.Errorf("unmount %s: %w: it is being mounted", path, api.ErrConflict)
	}
	k := im.key
	unlock, err := in.threads.Lock(ctx, k)
	if err != nil {
		return false, fmt.Errorf("unmount %s: %w", path, err)
	}
	m, err := in.unmountInspection(k, path)
	if err == nil {
		if err = in.store.DeleteInspectionMount(ctx, path); err != nil {
			err = fmt.Errorf("unmount %s: forget record: %w", path, err)
		}
	}
	unlock()
	if err != nil {
		return false, err
	}
	in.log.Info("inspection mount removed", "tenant", k.Tenant, "thread", k.Thread, "path", path)
	d, ok := m.(interface{ Done() <-chan struct{} })
	if !ok {
		return false, nil
	}
	t := time.NewTimer(in.drainWait)
	defer t.Stop()
	select {
	case <-d.Done():
		return false, nil
	case <-t.C:
	case <-ctx.Done():
	}
	in.log.Info("inspection mount left the tree but is still in use; it stops serving when its users let go",
		"tenant", k.Tenant, "thread", k.Thread, "path", path)
	return true, nil
}

// unmountInspection unmounts the inspection mount at path, which belongs
// to thread k, and drops it from the set; if the unmount fails it stays.
// It returns the unmounted mount (nil if it was not mounted). The thread
// lock of k must be held.
func (in *Inspections) unmountInspection(k meta.ThreadKey, path string) (io.Closer, error) {
	im := in.set.take(path, k)
	if im == nil {
		// Gone or replaced while we waited for the lock.
		return nil, fmt.Errorf("unmount %s: %w: no inspection mount of %s there", path, api.ErrNotFound, call.KeyName(k))
	}

	var err error
	if im.mount != nil {
		// A mount made onto a descriptor is detached through its own
		// descriptor: this cannot hang on the filesystem, nor take down
		// another mount that the path leads to now.
		err = call.Busy(im.mount.Close())
	} else {
		// It failed to mount at start; clear whatever a crash left.
		err = DetachStale(path)
	}
	if err != nil {
		if !in.set.put(path, im) && im.mount != nil {
			// Drained already: nobody else will try again.
			in.log.Error("unmount failed at shutdown: the mount stays", "tenant", k.Tenant, "thread", k.Thread, "path", path, "error", err)
		}
		in.log.Warn("refused: unmount failed", "tenant", k.Tenant, "thread", k.Thread, "path", path, "error", err)
		return nil, fmt.Errorf("unmount %s: %w", path, err)
	}
	return im.mount, nil
}

// UnmountAllOf unmounts every inspection mount of thread k (for its
// delete) and returns the paths of their records, for the caller to
// forget. It stops at the first unmount that fails. The thread lock of k
// must be held.
func (in *Inspections) UnmountAllOf(ctx context.Context, k meta.ThreadKey) ([]string, error) {
	recs, err := in.store.ListInspectionMounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list inspection mounts: %w", err)
	}
	var paths []string
	for _, r := range recs {
		if r.ThreadKey == k {
			paths = append(paths, r.Path)
		}
	}
	for _, p := range paths {
		im := in.set.get(p)
		if im == nil || im.key != k || im.pending {
			continue
		}
		if _, err := in.unmountInspection(k, p); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// List lists the inspection mounts: every record, with whether it is
// served, and why not where a start failed to.
func (in *Inspections) List(ctx context.Context) ([]api.MountInfo, error) {
	recs, err := in.store.ListInspectionMounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list inspection mounts: %w", err)
	}
	in.set.mu.Lock()
	defer in.set.mu.Unlock()
	out := make([]api.MountInfo, 0, len(recs))
	for _, r := range recs {
		mi := api.MountInfo{InspectionMount: r}
		if im := in.set.mounts[r.Path]; im != nil && !im.pending {
			mi.Mounted = im.mount != nil
			if im.mount == nil && im.err != nil {
				mi.Error = im.err.Error()
			}
		}
		out = append(out, mi)
	}
	return out, nil
}
