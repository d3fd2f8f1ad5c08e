package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"warren/fs"
	"warren/gateway/inspect"
	"warren/gateway/remount"
	"warren/meta"
)

// restoreParallel bounds the threads restored at once in the background.
const restoreParallel = 16

// restore prepares what the store says this host served, before the API
// serves: what must not race a call, and is cheap. A crashed daemon
// leaves dead FUSE mounts that answer ENOTCONN: every warren mount under
// the mount folder is detached first. Then the deletes a former run cut
// short are finished, the folders reconciled with the records, the jobs
// the former run left noted, and the inspection mounts served again.
// The threads themselves (their mounts, and a checkpoint restore a crash
// cut short) are left to the background (g.remounts, remountThread): a
// call for one of them does its thread's part itself at once (bindLocked,
// settleLocked), so that the API serves at once and no call waits for
// another thread's. A failure is logged and kept for ThreadInfo/MountInfo;
// it does not stop the start, and the next call that needs the thread
// tries again.
//
// It runs before the API serves, so it takes no thread locks; the
// background restore takes each thread's.
func (g *Gateway) restore(ctx context.Context) {
	var keys []meta.ThreadKey
	defer func() {
		// Always a queue, maybe empty: bindLocked and readiness ask it.
		start := time.Now()
		var failed atomic.Int64
		g.remounts = remount.New(keys, remount.Config[meta.ThreadKey]{
			Parallel: restoreParallel,
			Gate:     g.cfg.remountGate,
			Run: func(ctx context.Context, k meta.ThreadKey) {
				if !g.remountThread(ctx, k) {
					failed.Add(1)
				}
				if g.remounts.Left() == 0 {
					g.log.Info("restore: every thread served again", "threads", len(keys), "failed", failed.Load(), "took", time.Since(start))
				}
			},
		})
	}()
	// Every warren mount under the mount folder was left by a former run
	// (a daemon holds its data folder alone), recorded or not (a bind cut
	// short mounts before it records): its connection is aborted, so no
	// process inside hangs on a server that is gone or stuck, and it is
	// detached, so nothing is stacked on it or trips on ENOTCONN.
	detached, err := fs.DetachUnder(g.mntBase)
	for _, m := range detached {
		g.log.Debug("restore: detached a mount of a former run", "path", m.Path, "source", m.Source)
	}
	if len(detached) > 0 {
		g.log.Info("restore: detached the mounts of a former run", "mounts", len(detached))
	}
	if err != nil {
		g.log.Error("restore: detach the mounts of a former run", "error", err)
	}
	bs, err := g.store.ListBindings(ctx)
	if err != nil {
		g.log.Error("restore: list bindings", "error", err)
		return
	}
	// Both stay before the API serves: a bind in flight would race them
	// (a folder it just made looks like one with no record), and they cost
	// nothing per thread but for the threads they repair.
	bs = g.finishDeletes(ctx, bs)
	g.reconcileFolders(bs)
	g.jobs.NoteRestarted(ctx, bs)
	for _, b := range bs {
		if b.State != meta.StateBound && b.State != meta.StateClosed {
			continue
		}
		if b.HostID != "" && b.HostID != g.cfg.HostID {
			if b.State != meta.StateBound {
				continue
			}
			// Another host serves it (it may have taken it over from this
			// one while it was down): a mount this host left there when
			// it crashed is dead, and goes.
			g.log.Debug("restore: thread belongs to another host", "tenant", b.Tenant, "thread", b.Thread, "owner", b.HostID)
			if _, mountPath, err := g.threadPaths(b.ThreadKey); err == nil {
				if err := g.mounter.DetachStale(mountPath); err != nil {
					g.log.Warn("restore: detach a stale mount of a thread another host serves", "path", mountPath, "error", err)
				}
			}
			continue
		}
		// Bound: mounted again. Closed: its mount point sealed. Both: a
		// restore a crash cut short finished.
		keys = append(keys, b.ThreadKey)
	}

	mounted, failed, err := g.inspections.Restore(ctx)
	if err != nil {
		g.log.Error("restore: list inspection mounts", "error", err)
		return
	}
	g.log.Info("restore: serving; the threads are served again in the background", "threads", len(keys), "inspection_mounts", mounted, "inspection_failed", failed)
}

// remountThread is the background restore of thread k: under its lock,
// unless a call took k's part first (settleLocked). It says false if k's
// restore failed.
func (g *Gateway) remountThread(ctx context.Context, k meta.ThreadKey) bool {
	unlock, err := g.threads.locks.lock(ctx, k)
	if err != nil {
		return ctx.Err() != nil // the daemon stops; not a failure of k
	}
	defer unlock()
	return g.settleLocked(ctx, k)
}

// settleLocked does k's part of the start's restore, if it is still to
// do: a bound thread is mounted again, a closed one's mount point sealed,
// and a checkpoint restore a crash cut short is finished, so that no
// command of k runs on a workspace half restored. It says false if a step
// failed (logged, and for a mount kept for ThreadInfo; the next call that
// needs k tries the mount again). The thread lock of k must be held: the
// lock, with the queue's Take, makes sure k's part runs once, and every
// call that works in k waits for it (bindLocked).
func (g *Gateway) settleLocked(ctx context.Context, k meta.ThreadKey) bool {
	done, ok := g.remounts.Take(k)
	if !ok {
		return true
	}
	defer done()
	b, err := g.store.GetBinding(ctx, k)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return true // deleted meanwhile
		}
		g.log.Error("restore: read binding", "tenant", k.Tenant, "thread", k.Thread, "error", err)
		g.setMountErr(k, err)
		return false
	}
	if b.HostID != "" && b.HostID != g.cfg.HostID {
		return true // taken over meanwhile
	}
	ok = true
	switch b.State {
	case meta.StateClosed:
		// Not served: its mount point refuses writes, and what landed
		// there before is moved aside now.
		g.sealClosed(b)
	case meta.StateBound:
		if g.mounted(k) {
			break
		}
		if err := g.restoreThread(ctx, b); err != nil {
			g.log.Error("restore: mount thread", "tenant", b.Tenant, "thread", b.Thread, "path", b.MountPath, "error", err)
			g.setMountErr(k, err)
			ok = false
		}
	default:
		return true
	}
	h, err := g.store.GetHistory(ctx, k)
	if err != nil || h.Restoring == nil {
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			g.log.Error("restore: read the checkpoint history", "tenant", b.Tenant, "thread", b.Thread, "error", err)
			return false
		}
		return ok
	}
	// No checkpoint call of k holds its checkpoint lock meanwhile: each
	// binds first, and the first bind of k since the start waits for this
	// (FinishMoved relies on the same).
	if err := g.checkpoints.FinishRestore(ctx, k, b); err != nil {
		g.log.Error("restore: finish a restore cut short", "tenant", b.Tenant, "thread", b.Thread, "error", err)
		return false
	}
	return ok
}

// restoreThread mounts a bound thread again at its mount point.
func (g *Gateway) restoreThread(ctx context.Context, b meta.Binding) error {
	k := b.ThreadKey
	_, mountPath, err := g.threadPaths(k)
	if err != nil {
		return err
	}
	root, err := g.rootOf(b)
	if err != nil {
		return err
	}
	if err := g.mounter.DetachStale(mountPath); err != nil {
		return fmt.Errorf("detach stale mount %s: %w", mountPath, err)
	}
	// Its pin, taken over from this host's former run, before it is
	// served; another host may have taken the thread meanwhile.
	if err := g.hosts.Claim(ctx, k, &b); err != nil {
		return err
	}
	// A missing backing folder is an error, not something to create:
	// mounting an empty new one would pass for the thread's workspace.
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return fmt.Errorf("workspace %s is missing or not a folder (%v)", root, err)
	}
	// The daemon's default quota may have changed since the last run.
	if err := g.quotas.Apply(k, root, b.Settings); err != nil {
		return err
	}
	if err := g.prepareMountPoint(k, mountPath, nil); err != nil {
		return fmt.Errorf("prepare mount point: %w", err)
	}
	m, err := g.mount(ctx, k, root, mountPath, false)
	if err != nil {
		return err
	}
	g.putMount(k, m)
	return nil
}

// finishDeletes finishes the deletes a former run recorded and did not
// finish (state deleting), for threads this host serves, and returns the
// bindings left. A delete that fails again stays recorded: the thread
// answers as gone until a delete finishes it.
func (g *Gateway) finishDeletes(ctx context.Context, bs []meta.Binding) []meta.Binding {
	left := bs[:0:0]
	var (
		ms     []meta.InspectionMount // read at the first delete, for all
		listed bool
	)
	for _, b := range bs {
		if b.State != meta.StateDeleting || (b.HostID != "" && b.HostID != g.cfg.HostID) {
			left = append(left, b)
			continue
		}
		// The inspection mounts a former run left of the thread: their
		// records go with the delete, the mounts go now.
		if !listed {
			if l, err := g.store.ListInspectionMounts(ctx); err == nil {
				ms = l
			}
			listed = true
		}
		for _, m := range ms {
			if m.ThreadKey == b.ThreadKey {
				if err := inspect.DetachStale(m.Path); err != nil {
					g.log.Warn("restore: detach an inspection mount of a deleted thread", "path", m.Path, "error", err)
				}
			}
		}
		err := g.hosts.Claim(ctx, b.ThreadKey, &b)
		if err == nil {
			err = g.deleteLocked(ctx, b)
		}
		if err != nil {
			g.log.Error("restore: finish a delete cut short", "tenant", b.Tenant, "thread", b.Thread, "error", err)
			left = append(left, b)
			continue
		}
		g.log.Info("restore: finished a delete cut short", "tenant", b.Tenant, "thread", b.Thread)
	}
	return left
}

// reconcileFolders takes away the folders a bind cut short left without a
// record. It runs after every mount under the mount folder is detached.
//
// A mount-point folder with no record is removed; what is in it (written
// while it was not served and not sealed) is moved aside first, as for a
// thread's mount point (mountpoint_linux.go). A workspace folder with no record is removed
// if empty, and moved aside (DataDir/orphans/<time>/...) if not: it may
// still be someone's work (a bind whose record write timed out keeps its
// folder on purpose; a store restored from an older copy), which no check
// can tell from garbage, while left in place it would be adopted as the
// workspace of the next bind of those ids. Workspace folders are
// reconciled only when they are this daemon's own (the default folder in
// DataDir): a workspaces folder shared with other servers holds the folders
// of their binds in flight.
func (g *Gateway) reconcileFolders(bs []meta.Binding) {
	mounts := make(map[string]bool)
	roots := make(map[string]bool)
	for _, b := range bs {
		if root, mountPath, err := g.threadPaths(b.ThreadKey); err == nil {
			roots[root], mounts[mountPath] = true, true
		}
		if b.Root != "" {
			roots[filepath.Clean(b.Root)] = true
		}
	}
	for _, dir := range leafFolders(g.mntBase) {
		if mounts[dir] {
			continue
		}
		// Immutable (mountpoint_linux.go): its flag goes first. What is
		// in it goes aside, as for a mount point of a thread.
		err := removeMountPoint(dir)
		if err != nil {
			if err = g.moveAside(meta.ThreadKey{}, dir); err == nil {
				err = removeMountPoint(dir)
			}
		}
		if err != nil {
			g.log.Warn("restore: a mount-point folder with no record is left as it is", "path", dir, "error", err)
			continue
		}
		g.log.Info("restore: removed a mount-point folder with no record", "path", dir)
	}
	if filepath.Dir(g.wsBase) != filepath.Clean(g.cfg.DataDir) {
		return
	}
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	for _, dir := range leafFolders(g.wsBase) {
		if roots[dir] {
			continue
		}
		if err := os.Remove(dir); err == nil {
			g.log.Info("restore: removed an empty workspace folder with no record", "path", dir)
			continue
		}
		rel, err := filepath.Rel(g.wsBase, dir)
		if err != nil {
			continue
		}
		aside := filepath.Join(g.cfg.DataDir, "orphans", stamp, rel)
		if err := os.MkdirAll(filepath.Dir(aside), 0o700); err == nil {
			err = os.Rename(dir, aside)
		}
		if err != nil {
			g.log.Error("restore: move aside a workspace folder with no record", "path", dir, "error", err)
			continue
		}
		g.log.Warn("restore: moved aside a workspace folder with no record", "path", dir, "to", aside)
	}
}

// leafFolders lists the folders two levels below base (base/tenant/thread),
// without following links.
func leafFolders(base string) []string {
	var out []string
	tenants, _ := os.ReadDir(base)
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		threads, _ := os.ReadDir(filepath.Join(base, t.Name()))
		for _, th := range threads {
			if th.IsDir() {
				out = append(out, filepath.Join(base, t.Name(), th.Name()))
			}
		}
	}
	return out
}
