package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"warren/fs"
	"warren/meta"
)

// MountRequest asks for an inspection mount of a thread's workspace.
type MountRequest struct {
	Tenant string `json:"tenant"`
	Thread string `json:"thread"`
	// Path is the folder to mount on: absolute, existing, empty, owned by
	// the caller, not a mount already and not inside the data folder.
	Path string `json:"path"`
	// Writable allows writes; inspection mounts are read-only otherwise.
	Writable bool `json:"writable"`
}

// MountInfo is an inspection mount as the API shows it.
type MountInfo struct {
	meta.InspectionMount
	Mounted bool   `json:"mounted"`
	Error   string `json:"error,omitempty"`
}

// MountInspection serves thread (req.Tenant, req.Thread)'s workspace a
// second time at req.Path, binding the thread first if it is not bound.
// owner is the uid the mount is made for (the API's peer): unless it is
// root, req.Path must belong to it, so a caller cannot cover a folder of
// someone else.
func (g *Gateway) MountInspection(ctx context.Context, req MountRequest, owner uint32) (MountInfo, error) {
	k, err := threadKey(req.Tenant, req.Thread)
	if err != nil {
		return MountInfo{}, err
	}
	path, err := g.checkInspectionDir(req.Path, owner)
	if err != nil {
		g.log.Warn("refused: inspection mount", "tenant", k.Tenant, "thread", k.Thread, "path", req.Path, "error", err)
		return MountInfo{}, fmt.Errorf("mount %s for %s: %w", req.Path, keyName(k), err)
	}
	if err := g.reserveInspection(path, k); err != nil {
		g.log.Warn("refused: inspection mount", "tenant", k.Tenant, "thread", k.Thread, "path", path, "error", err)
		return MountInfo{}, fmt.Errorf("mount %s for %s: %w", path, keyName(k), err)
	}
	reserved := true
	defer func() {
		if reserved {
			g.mu.Lock()
			delete(g.inspections, path)
			g.mu.Unlock()
		}
	}()

	unlock, err := g.threadLocks.lock(ctx, k)
	if err != nil {
		return MountInfo{}, fmt.Errorf("mount %s for %s: %w", path, keyName(k), err)
	}
	defer unlock()
	b, err := g.bindLocked(ctx, k, nil)
	if err != nil {
		return MountInfo{}, fmt.Errorf("mount %s: %w", path, err)
	}

	root, err := g.rootOf(b)
	if err != nil {
		return MountInfo{}, err
	}
	m, err := g.mount(ctx, k, root, path, !req.Writable)
	if err != nil {
		return MountInfo{}, fmt.Errorf("inspection %w", err)
	}
	rec, err := g.store.PutInspectionMount(ctx, meta.InspectionMount{
		ThreadKey: k,
		Path:      path,
		Writable:  req.Writable,
		MadeAt:    time.Now().UTC(),
	})
	if err != nil {
		if cerr := m.Close(); cerr != nil {
			g.log.Error("undo inspection mount", "path", path, "error", cerr)
		}
		return MountInfo{}, fmt.Errorf("mount %s: write record: %w", path, err)
	}

	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		// Close did not see this mount; take it down here. The record
		// stays, so the next start serves it again.
		if cerr := m.Close(); cerr != nil {
			g.log.Error("unmount at shutdown", "path", path, "error", cerr)
		}
		return MountInfo{}, fmt.Errorf("mount %s: %w", path, ErrClosed)
	}
	g.inspections[path] = &inspectionMount{key: k, mount: m}
	reserved = false
	g.mu.Unlock()
	g.log.Info("inspection mount made", "tenant", k.Tenant, "thread", k.Thread, "path", path, "writable", req.Writable)
	return MountInfo{InspectionMount: rec, Mounted: true}, nil
}

// reserveInspection claims path for a mount being made, refusing a path
// that is served already, or that lies inside or around one.
func (g *Gateway) reserveInspection(path string, k meta.ThreadKey) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	for p := range g.inspections {
		if p == path || within(p, path) || within(path, p) {
			return fmt.Errorf("%w: %s is inside or around the inspection mount %s", ErrConflict, path, p)
		}
	}
	g.inspections[path] = &inspectionMount{key: k, pending: true}
	return nil
}

// checkInspectionDir checks a client's mount folder and returns it with
// links resolved. The mount is made at the resolved path, which is also the
// name it is recorded and unmounted by.
func (g *Gateway) checkInspectionDir(dir string, owner uint32) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrInvalid, dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		return "", fmt.Errorf("%w: resolve %s: %w", ErrInvalid, dir, err)
	}
	if real == g.dataDir || within(g.dataDir, real) {
		return "", fmt.Errorf("%w: %s is inside the data folder %s", ErrInvalid, real, g.dataDir)
	}
	if real == g.wsReal || within(g.wsReal, real) {
		return "", fmt.Errorf("%w: %s is inside the workspaces folder %s", ErrInvalid, real, g.wsReal)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(real, &st); err != nil {
		return "", fmt.Errorf("%w: stat %s: %w", ErrInvalid, real, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return "", fmt.Errorf("%w: %s is not a folder", ErrInvalid, real)
	}
	if owner != 0 && st.Uid != owner {
		return "", fmt.Errorf("%w: %s belongs to uid %d, not to the caller (uid %d)", ErrForbidden, real, st.Uid, owner)
	}
	// A mount first: a mount's own files would make it "not empty", and
	// a folder already served is a conflict, not a bad request.
	mounted, err := isMountPoint(real, &st)
	if err != nil {
		return "", fmt.Errorf("check whether %s is a mount: %w", real, err)
	}
	if mounted {
		return "", fmt.Errorf("%w: %s is a mount point already", ErrConflict, real)
	}
	if err := checkEmpty(real); err != nil {
		return "", err
	}
	return real, nil
}

// checkEmpty refuses a folder with entries: a mount would hide them.
func checkEmpty(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrInvalid, dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrInvalid, dir, err)
	}
	return fmt.Errorf("%w: %s is not empty (it holds %q)", ErrInvalid, dir, names[0])
}

// isMountPoint reports whether dir (whose lstat is st) is a mount point:
// on another device than its parent, or listed in the mount table (a bind
// mount of the same filesystem keeps the device).
func isMountPoint(dir string, st *syscall.Stat_t) (bool, error) {
	if dir == "/" {
		return true, nil
	}
	var parent syscall.Stat_t
	if err := syscall.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, fmt.Errorf("stat parent: %w", err)
	}
	if parent.Dev != st.Dev {
		return true, nil
	}
	return fs.IsMountpoint(dir)
}

// within reports whether path lies strictly below dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Unmount takes down the inspection mount at path and forgets it.
func (g *Gateway) Unmount(ctx context.Context, path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%w: %q is not an absolute path", ErrInvalid, path)
	}
	path = filepath.Clean(path)
	// The mount was recorded under its resolved path; a dead mount cannot
	// be resolved, so fall back to the path as given.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	g.mu.Lock()
	im := g.inspections[path]
	g.mu.Unlock()
	if im == nil {
		g.log.Warn("refused: no inspection mount", "path", path)
		return fmt.Errorf("unmount %s: %w: no inspection mount there", path, ErrNotFound)
	}
	if im.pending {
		return fmt.Errorf("unmount %s: %w: it is being mounted", path, ErrConflict)
	}
	k := im.key
	unlock, err := g.threadLocks.lock(ctx, k)
	if err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	defer unlock()
	if err := g.unmountInspection(k, path); err != nil {
		return err
	}
	if err := g.store.DeleteInspectionMount(ctx, path); err != nil {
		return fmt.Errorf("unmount %s: forget record: %w", path, err)
	}
	g.log.Info("inspection mount removed", "tenant", k.Tenant, "thread", k.Thread, "path", path)
	return nil
}

// unmountInspection unmounts the inspection mount at path, which belongs
// to thread k, and drops it from the map; if the unmount fails it stays.
// The thread lock of k must be held.
func (g *Gateway) unmountInspection(k meta.ThreadKey, path string) error {
	g.mu.Lock()
	im := g.inspections[path]
	if im == nil || im.key != k || im.pending {
		g.mu.Unlock()
		// Gone or replaced while we waited for the lock.
		return fmt.Errorf("unmount %s: %w: no inspection mount of %s there", path, ErrNotFound, keyName(k))
	}
	delete(g.inspections, path)
	g.mu.Unlock()

	var err error
	if im.mount != nil {
		err = busy(im.mount.Close())
	} else {
		// It failed to mount at start; clear whatever a crash left.
		err = g.mounter.DetachStale(path)
	}
	if err != nil {
		g.mu.Lock()
		g.inspections[path] = im
		g.mu.Unlock()
		g.log.Warn("refused: unmount failed", "tenant", k.Tenant, "thread", k.Thread, "path", path, "error", err)
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// unmountInspectionsOf unmounts every inspection mount of k and returns
// the paths of their records, for the caller to forget. It stops at the
// first unmount that fails. The thread lock of k must be held.
func (g *Gateway) unmountInspectionsOf(ctx context.Context, k meta.ThreadKey) ([]string, error) {
	recs, err := g.store.ListInspectionMounts(ctx)
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
		g.mu.Lock()
		im := g.inspections[p]
		g.mu.Unlock()
		if im == nil || im.key != k || im.pending {
			continue
		}
		if err := g.unmountInspection(k, p); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// Mounts lists the inspection mounts.
func (g *Gateway) Mounts(ctx context.Context) ([]MountInfo, error) {
	recs, err := g.store.ListInspectionMounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list inspection mounts: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]MountInfo, 0, len(recs))
	for _, r := range recs {
		mi := MountInfo{InspectionMount: r}
		if im := g.inspections[r.Path]; im != nil && !im.pending {
			mi.Mounted = im.mount != nil
			if im.mount == nil && im.err != nil {
				mi.Error = im.err.Error()
			}
		}
		out = append(out, mi)
	}
	return out, nil
}
