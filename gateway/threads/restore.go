package threads

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"warren/fs"
	"warren/gateway/remount"
	"warren/meta"
)

// restoreParallel bounds the threads restored at once in the background.
const restoreParallel = 16

// Restore prepares what the store says this host served, before the API
// serves: what must not race a call, and is cheap. A crashed daemon
// leaves dead FUSE mounts that answer ENOTCONN: every warren mount under
// the mount folder is detached first. Then the deletes a former run cut
// short are finished, the folders reconciled with the records, the jobs
// the former run left noted (the inspection mounts are served again by
// their room, after this).
// The threads themselves (their mounts, and a checkpoint restore a crash
// cut short) are left to the background (t.remounts, remountThread): a
// call for one of them does its thread's part itself at once (bindLocked,
// settleLocked), so that the API serves at once and no call waits for
// another thread's. A failure is logged and kept for ThreadInfo/MountInfo;
// it does not stop the start, and the next call that needs the thread
// tries again. It returns how many threads the background restore
// serves again, or the error of listing the bindings.
//
// It runs before the API serves, so it takes no thread locks; the
// background restore takes each thread's.
func (t *Threads) Restore(ctx context.Context) (threads int, err error) {
	var keys []meta.ThreadKey
	defer func() {
		// Always a queue, maybe empty: bindLocked and readiness ask it.
		start := time.Now()
		var failed atomic.Int64
		t.remounts = remount.New(keys, remount.Config[meta.ThreadKey]{
			Parallel: restoreParallel,
			Gate:     t.cfg.RemountGate,
			Run: func(ctx context.Context, k meta.ThreadKey) {
				if !t.remountThread(ctx, k) {
					failed.Add(1)
				}
				if t.remounts.Left() == 0 {
					t.log.Info("restore: every thread served again", "threads", len(keys), "failed", failed.Load(), "took", time.Since(start))
				}
			},
		})
	}()
	// Every warren mount under the mount folder was left by a former run
	// (a daemon holds its data folder alone), recorded or not (a bind cut
	// short mounts before it records): its connection is aborted, so no
	// process inside hangs on a server that is gone or stuck, and it is
	// detached, so nothing is stacked on it or trips on ENOTCONN.
	detached, err := fs.DetachUnder(t.mntBase)
	for _, m := range detached {
		t.log.Debug("restore: detached a mount of a former run", "path", m.Path, "source", m.Source)
	}
	if len(detached) > 0 {
		t.log.Info("restore: detached the mounts of a former run", "mounts", len(detached))
	}
	if err != nil {
		t.log.Error("restore: detach the mounts of a former run", "error", err)
	}
	bs, err := t.store.ListBindings(ctx)
	if err != nil {
		t.log.Error("restore: list bindings", "error", err)
		return 0, err
	}
	// Both stay before the API serves: a bind in flight would race them
	// (a folder it just made looks like one with no record), and they cost
	// nothing per thread but for the threads they repair.
	bs = t.finishDeletes(ctx, bs)
	t.reconcileFolders(bs)
	t.deps.Jobs.NoteRestarted(ctx, bs)
	for _, b := range bs {
		if b.State != meta.StateBound && b.State != meta.StateClosed {
			continue
		}
		if b.HostID != "" && b.HostID != t.cfg.HostID {
			if b.State != meta.StateBound {
				continue
			}
			// Another host serves it (it may have taken it over from this
			// one while it was down): a mount this host left there when
			// it crashed is dead, and goes.
			t.log.Debug("restore: thread belongs to another host", "tenant", b.Tenant, "thread", b.Thread, "owner", b.HostID)
			if _, mountPath, err := t.Paths(b.ThreadKey); err == nil {
				if err := t.mounter.DetachStale(mountPath); err != nil {
					t.log.Warn("restore: detach a stale mount of a thread another host serves", "path", mountPath, "error", err)
				}
			}
			continue
		}
		// Bound: mounted again. Closed: its mount point sealed. Both: a
		// restore a crash cut short finished.
		keys = append(keys, b.ThreadKey)
	}

	return len(keys), nil
}

// remountThread is the background restore of thread k: under its lock,
// unless a call took k's part first (settleLocked). It says false if k's
// restore failed.
func (t *Threads) remountThread(ctx context.Context, k meta.ThreadKey) bool {
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return ctx.Err() != nil // the daemon stops; not a failure of k
	}
	defer unlock()
	return t.settleLocked(ctx, k)
}

// settleLocked does k's part of the start's restore, if it is still to
// do: a bound thread is mounted again, a closed one's mount point sealed,
// and a checkpoint restore a crash cut short is finished, so that no
// command of k runs on a workspace half restored. It says false if a step
// failed (logged, and for a mount kept for ThreadInfo; the next call that
// needs k tries the mount again). The thread lock of k must be held: the
// lock, with the queue's Take, makes sure k's part runs once, and every
// call that works in k waits for it (bindLocked).
func (t *Threads) settleLocked(ctx context.Context, k meta.ThreadKey) bool {
	done, ok := t.remounts.Take(k)
	if !ok {
		return true
	}
	defer done()
	b, err := t.store.GetBinding(ctx, k)
	if err != nil {
		if errors.Is(err, meta.ErrNotFound) {
			return true // deleted meanwhile
		}
		t.log.Error("restore: read binding", "tenant", k.Tenant, "thread", k.Thread, "error", err)
		t.setMountErr(k, err)
		return false
	}
	if b.HostID != "" && b.HostID != t.cfg.HostID {
		return true // taken over meanwhile
	}
	ok = true
	switch b.State {
	case meta.StateClosed:
		// Not served: its mount point refuses writes, and what landed
		// there before is moved aside now.
		t.sealClosed(b)
	case meta.StateBound:
		if t.Mounted(k) {
			break
		}
		if err := t.restoreThread(ctx, b); err != nil {
			t.log.Error("restore: mount thread", "tenant", b.Tenant, "thread", b.Thread, "path", b.MountPath, "error", err)
			t.setMountErr(k, err)
			ok = false
		}
	default:
		return true
	}
	h, err := t.store.GetHistory(ctx, k)
	if err != nil || h.Restoring == nil {
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			t.log.Error("restore: read the checkpoint history", "tenant", b.Tenant, "thread", b.Thread, "error", err)
			return false
		}
		return ok
	}
	// No checkpoint call of k holds its checkpoint lock meanwhile: each
	// binds first, and the first bind of k since the start waits for this
	// (FinishMoved relies on the same).
	if err := t.deps.History.FinishRestore(ctx, k, b); err != nil {
		t.log.Error("restore: finish a restore cut short", "tenant", b.Tenant, "thread", b.Thread, "error", err)
		return false
	}
	return ok
}

// restoreThread mounts a bound thread again at its mount point.
func (t *Threads) restoreThread(ctx context.Context, b meta.Binding) error {
	k := b.ThreadKey
	_, mountPath, err := t.Paths(k)
	if err != nil {
		return err
	}
	root, err := t.RootOf(b)
	if err != nil {
		return err
	}
	if err := t.mounter.DetachStale(mountPath); err != nil {
		return fmt.Errorf("detach stale mount %s: %w", mountPath, err)
	}
	// Its pin, taken over from this host's former run, before it is
	// served; another host may have taken the thread meanwhile.
	if err := t.deps.Hosts.Claim(ctx, k, &b); err != nil {
		return err
	}
	// A missing backing folder is an error, not something to create:
	// mounting an empty new one would pass for the thread's workspace.
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		return fmt.Errorf("workspace %s is missing or not a folder (%v)", root, err)
	}
	// A thread bound before homes gets its home here (home.go).
	home, _, err := makeHomeOf(nil, k, root)
	if err != nil {
		return err
	}
	// The daemon's default quota may have changed since the last run.
	if err := t.cfg.Quotas.Apply(k, root, home, b.Settings); err != nil {
		return err
	}
	if err := t.prepareMountPoint(k, mountPath, nil); err != nil {
		return fmt.Errorf("prepare mount point: %w", err)
	}
	m, err := t.mount(ctx, k, root, mountPath, false)
	if err != nil {
		return err
	}
	t.putMount(k, m)
	return nil
}

// finishDeletes finishes the deletes a former run recorded and did not
// finish (state deleting), for threads this host serves, and returns the
// bindings left. A delete that fails again stays recorded: the thread
// answers as gone until a delete finishes it.
func (t *Threads) finishDeletes(ctx context.Context, bs []meta.Binding) []meta.Binding {
	left := bs[:0:0]
	var (
		ms     []meta.InspectionMount // read at the first delete, for all
		listed bool
	)
	for _, b := range bs {
		if b.State != meta.StateDeleting || (b.HostID != "" && b.HostID != t.cfg.HostID) {
			left = append(left, b)
			continue
		}
		// The inspection mounts a former run left of the thread: their
		// records go with the delete, the mounts go now.
		if !listed {
			if l, err := t.store.ListInspectionMounts(ctx); err == nil {
				ms = l
			}
			listed = true
		}
		for _, m := range ms {
			if m.ThreadKey == b.ThreadKey {
				if err := t.deps.Inspections.DetachStale(m.Path); err != nil {
					t.log.Warn("restore: detach an inspection mount of a deleted thread", "path", m.Path, "error", err)
				}
			}
		}
		err := t.deps.Hosts.Claim(ctx, b.ThreadKey, &b)
		if err == nil {
			err = t.deleteLocked(ctx, b)
		}
		if err != nil {
			t.log.Error("restore: finish a delete cut short", "tenant", b.Tenant, "thread", b.Thread, "error", err)
			left = append(left, b)
			continue
		}
		t.log.Info("restore: finished a delete cut short", "tenant", b.Tenant, "thread", b.Thread)
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
// workspace of the next bind of those ids. A home folder (home.go) with
// no record goes the same way. Workspace folders are
// reconciled only when they are this daemon's own (the default folder in
// DataDir): a workspaces folder shared with other servers holds the folders
// of their binds in flight.
func (t *Threads) reconcileFolders(bs []meta.Binding) {
	mounts := make(map[string]bool)
	roots := make(map[string]bool) // workspace and home folders
	for _, b := range bs {
		if root, mountPath, err := t.Paths(b.ThreadKey); err == nil {
			roots[root], mounts[mountPath] = true, true
			if home, err := homeOf(root, b.ThreadKey); err == nil {
				roots[home] = true
			}
		}
		if b.Root != "" {
			roots[filepath.Clean(b.Root)] = true
		}
		if home, err := t.HomeOf(b); err == nil {
			roots[home] = true
		}
	}
	for _, dir := range leafFolders(t.mntBase) {
		if mounts[dir] {
			continue
		}
		// Immutable (mountpoint_linux.go): its flag goes first. What is
		// in it goes aside, as for a mount point of a thread.
		err := removeMountPoint(dir)
		if err != nil {
			if err = t.moveAside(meta.ThreadKey{}, dir); err == nil {
				err = removeMountPoint(dir)
			}
		}
		if err != nil {
			t.log.Warn("restore: a mount-point folder with no record is left as it is", "path", dir, "error", err)
			continue
		}
		t.log.Info("restore: removed a mount-point folder with no record", "path", dir)
	}
	if filepath.Dir(t.wsBase) != filepath.Clean(t.cfg.DataDir) {
		return
	}
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	// A home with no record goes like a workspace: it may hold the only
	// copy of something too (a tool's credentials, say).
	for _, dir := range append(leafFolders(t.wsBase), leafFolders(filepath.Join(t.wsBase, HomesDir))...) {
		if roots[dir] {
			continue
		}
		if err := os.Remove(dir); err == nil {
			t.log.Info("restore: removed an empty workspace or home folder with no record", "path", dir)
			continue
		}
		rel, err := filepath.Rel(t.wsBase, dir)
		if err != nil {
			continue
		}
		aside := filepath.Join(t.cfg.DataDir, "orphans", stamp, rel)
		if err := os.MkdirAll(filepath.Dir(aside), 0o700); err == nil {
			err = os.Rename(dir, aside)
		}
		if err != nil {
			t.log.Error("restore: move aside a workspace or home folder with no record", "path", dir, "error", err)
			continue
		}
		t.log.Warn("restore: moved aside a workspace or home folder with no record", "path", dir, "to", aside)
	}
}

// leafFolders lists the folders two levels below base (base/tenant/thread),
// without following links. HomesDir is no tenant's folder.
func leafFolders(base string) []string {
	var out []string
	tenants, _ := os.ReadDir(base)
	for _, t := range tenants {
		if !t.IsDir() || t.Name() == HomesDir {
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
