package threads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/hosts"
	"warren/gateway/keyed"
	"warren/gateway/threadlimit"
	"warren/jail"
	"warren/meta"
)

// threadSet is the threads this gateway serves: the lock of each thread,
// and the mounts.
type threadSet struct {
	// locks holds a lock per thread, taken first and held across the slow
	// steps of an operation on the thread (see the package's lock order).
	locks keyed.Locks[meta.ThreadKey]
	// turns holds a lock per thread that serializes its checkpoints,
	// restores and delete, taken before its lock in locks when both are.
	turns keyed.Locks[meta.ThreadKey]
	// admit holds a slot for each mounted thread (package threadlimit):
	// a bind takes one before it mounts (Threads.admitThread), a mount
	// kept here holds one, and one taken out of the set gives it back.
	// Set at Start, never changed; its lock is a leaf, taken under mu.
	admit *threadlimit.Admitter

	mu sync.Mutex
	// closed is set by Close: no mount is added after it.
	closed bool
	// drained is set once Close unmounted everything (unmountAll): no
	// mount is put back after it.
	drained bool
	// mounts holds the mounted threads, and the last mount error of bound
	// threads that are not mounted.
	mounts map[meta.ThreadKey]*threadMount
}

// recordTimeout bounds TakeDown's wait for the thread lock and the store
// calls of its check, which belong to no request.
const recordTimeout = 30 * time.Second

// threadMount is the in-memory state of one bound thread.
type threadMount struct {
	mount io.Closer // nil when not mounted
	err   error     // why the last mount attempt failed, when mount is nil
	// touched is when a call last changed or used the thread (package
	// idle reads it).
	touched time.Time
}

// add keeps k's new mount m, or refuses it with ErrClosed once the
// gateway is closing: the caller then unmounts m.
func (ts *threadSet) add(k meta.ThreadKey, m io.Closer) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return api.ErrClosed
	}
	ts.mounts[k] = &threadMount{mount: m}
	ts.admit.Hold(k) // taken by the bind already: nothing, but said here
	return nil
}

// put keeps k's mount m: one restored at start, or one whose unmount
// failed. It says false once unmountAll ran, which would never see it.
func (ts *threadSet) put(k meta.ThreadKey, m io.Closer) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.drained {
		return false
	}
	ts.mounts[k] = &threadMount{mount: m}
	// Served already (restored, or its unmount failed): never refused.
	ts.admit.Hold(k)
	return true
}

// take removes k's mount from the set and returns it (nil if none). The
// caller unmounts it, or puts it back if that fails.
func (ts *threadSet) take(k meta.ThreadKey) io.Closer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.mounts[k]
	delete(ts.mounts, k)
	ts.admit.Release(k)
	if t == nil {
		return nil
	}
	return t.mount
}

// forget drops what the set knows of k.
func (ts *threadSet) forget(k meta.ThreadKey) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.mounts, k)
	ts.admit.Release(k)
}

// mounted reports whether k is mounted.
func (ts *threadSet) mounted(k meta.ThreadKey) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.mounts[k]
	return t != nil && t.mount != nil
}

// mountedKeys lists the mounted threads.
func (ts *threadSet) mountedKeys() []meta.ThreadKey {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var keys []meta.ThreadKey
	for k, t := range ts.mounts {
		if t.mount != nil {
			keys = append(keys, k)
		}
	}
	return keys
}

// setErr remembers why k could not be mounted, unless it is mounted.
func (ts *threadSet) setErr(k meta.ThreadKey, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.mounts[k]; t != nil && t.mount != nil {
		return
	}
	ts.mounts[k] = &threadMount{err: err}
}

// state returns whether k is mounted and, if it is not, why its last
// mount failed.
func (ts *threadSet) state(k meta.ThreadKey) (mounted bool, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.mounts[k]
	if t == nil {
		return false, nil
	}
	if t.mount != nil {
		return true, nil
	}
	return false, t.err
}

// counts returns how many threads are mounted, and how many are bound
// here with a failed mount.
func (ts *threadSet) counts() (mounted, failed int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.mounts {
		if t.mount != nil {
			mounted++
		} else if t.err != nil {
			failed++
		}
	}
	return mounted, failed
}

// touch notes that a call changed or used thread k (the idle reclaim).
func (ts *threadSet) touch(k meta.ThreadKey) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tm := ts.mounts[k]; tm != nil {
		tm.touched = time.Now()
	}
}

// close refuses new mounts from now on (add).
func (ts *threadSet) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
}

// drain empties the set, refuses mounts put back from now on, and returns
// the mounts it held, for unmountAll.
func (ts *threadSet) drain() map[meta.ThreadKey]io.Closer {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed, ts.drained = true, true
	out := make(map[meta.ThreadKey]io.Closer)
	for k, t := range ts.mounts {
		if t.mount != nil {
			out[k] = t.mount
		}
		ts.admit.Release(k)
	}
	clear(ts.mounts)
	return out
}

// Paths returns the backing root and the mount point of k.
func (t *Threads) Paths(k meta.ThreadKey) (root, mountPath string, err error) {
	root, err = WorkspaceRoot(t.wsBase, k.Tenant, k.Thread)
	if err != nil {
		return "", "", fmt.Errorf("workspace root: %w", err)
	}
	mountPath, err = WorkspaceRoot(t.mntBase, k.Tenant, k.Thread)
	if err != nil {
		return "", "", fmt.Errorf("mount path: %w", err)
	}
	return root, mountPath, nil
}

// Bind binds thread k (lazily, idempotently) and returns its binding.
func (t *Threads) Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	return t.BindWith(ctx, tenant, thread, nil)
}

// BindWith binds thread k like Bind and, unless settings is nil, gives it
// those settings (replacing any it had). New variables and job limits
// apply to the next command; a running jail whose network or limits would
// change is not restarted behind its commands' backs: the call is refused
// until the thread is closed.
func (t *Threads) BindWith(ctx context.Context, tenant, thread string, settings *meta.Settings) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	if settings != nil {
		if err := t.checkSettings(*settings); err != nil {
			return api.ThreadInfo{}, err
		}
		s := CloneSettings(*settings)
		settings = &s
	}
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return api.ThreadInfo{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	defer unlock()
	b, err := t.BindLocked(ctx, k, settings)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	return t.info(b), nil
}

// UpdateSettings binds thread k like Bind and gives it the settings
// change makes of its own, under the thread lock: a bind made meanwhile
// is not lost. It is BindWith's rules otherwise.
func (t *Threads) UpdateSettings(ctx context.Context, tenant, thread string, change func(meta.Settings) (meta.Settings, error)) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return api.ThreadInfo{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	defer unlock()
	b, err := t.BindLocked(ctx, k, nil)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	s, err := change(CloneSettings(b.Settings))
	if err != nil {
		return api.ThreadInfo{}, err
	}
	if err := t.checkSettings(s); err != nil {
		return api.ThreadInfo{}, err
	}
	if b, err = t.BindLocked(ctx, k, &s); err != nil {
		return api.ThreadInfo{}, err
	}
	return t.info(b), nil
}

// BindLocked returns k's binding, binding and mounting it first if needed,
// and gives it settings unless they are nil. On failure nothing of this
// attempt is left: no record, no mount, no folder it created. The thread
// lock of k must be held.
func (t *Threads) BindLocked(ctx context.Context, k meta.ThreadKey, settings *meta.Settings) (meta.Binding, error) {
	// A thread the start left to the background is served again now, by
	// this call, if the background has not come to it: the call waits
	// for its own thread, never for the whole restore.
	t.settleLocked(ctx, k)
	old, err := t.store.GetBinding(ctx, k)
	found := err == nil
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return meta.Binding{}, fmt.Errorf("bind %s: read binding: %w", call.KeyName(k), err)
	}
	if found && old.State == meta.StateDeleting {
		// Never served half deleted: the next delete or start finishes it.
		return meta.Binding{}, deletingError(k)
	}
	var oldp *meta.Binding
	if found {
		oldp = &old
	}
	if settings, err = t.pinImage(ctx, k, settings, oldp); err != nil {
		return meta.Binding{}, err
	}
	if err := t.deps.Hosts.Claim(ctx, k, oldp); err != nil {
		return meta.Binding{}, err
	}
	// A thread another host served (it died: this gateway holds the pin
	// now) resumes in its folder, or starts afresh, or is gone.
	moved := found && old.HostID != "" && old.HostID != t.cfg.HostID && t.cfg.HostID != ""
	if found && old.State == meta.StateGone && !moved {
		return meta.Binding{}, hosts.GoneError(old)
	}
	if found && old.State == meta.StateClosed && t.Mounted(k) && !moved {
		// Closed while its jobs ran, and still mounted for them: bound
		// again, as it is.
		b := old
		b.State, b.ClosedAt = meta.StateBound, time.Time{}
		if settings != nil {
			b.Settings = *settings
			if t.cfg.Quotas.DiskBytes(b.Settings) != t.cfg.Quotas.DiskBytes(old.Settings) {
				root, err := t.RootOf(old)
				var home string
				if err == nil {
					home, _, err = makeHomeOf(nil, k, root)
				}
				if err == nil {
					err = t.cfg.Quotas.Apply(k, root, home, b.Settings)
				}
				if err != nil {
					return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
				}
			}
		}
		b, err := t.store.UpdateBinding(ctx, b)
		if err != nil {
			return meta.Binding{}, fmt.Errorf("bind %s: write binding: %w", call.KeyName(k), err)
		}
		t.deps.Jobs.SetClosing(k, false)
		t.log.Info("thread bound again while its jobs ran", "tenant", k.Tenant, "thread", k.Thread)
		t.cfg.Events.Emit(api.Event{Type: api.EventThreadBound, Tenant: k.Tenant, Thread: k.Thread, Actor: call.Actor(ctx), Message: "bound again; it was kept mounted for its jobs"})
		return b, nil
	}
	if found && old.State == meta.StateBound && t.Mounted(k) && !moved {
		if settings == nil || reflect.DeepEqual(*settings, old.Settings) {
			return old, nil
		}
		return t.resettle(ctx, old, *settings)
	}

	root, mountPath, err := t.Paths(k)
	if err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	var undo undoStack
	defer undo.run(t.log)
	// A new mount takes a slot first: past a limit it is refused before
	// anything is made or taken over.
	if err := t.admitThread(k, &undo); err != nil {
		return meta.Binding{}, err
	}
	fresh := false
	switch {
	case moved:
		if root, fresh, err = t.takeOver(ctx, old); err != nil {
			return meta.Binding{}, err
		}
	case found:
		if root, err = t.RootOf(old); err != nil {
			return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
		}
	}

	// A dead FUSE mount would make every step below fail with ENOTCONN
	// (or be covered by the new one). A record means this gateway (or a
	// crashed one) mounted here before; without one, a bind cut short by
	// a crash may have mounted here too.
	if err := t.mounter.DetachStale(mountPath); err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: detach stale mount %s: %w", call.KeyName(k), mountPath, err)
	}
	if found {
		// The thread had a workspace (unless a fresh one replaces it):
		// if its folder vanished, say so rather than serve an empty one
		// in its place.
		if _, err := os.Lstat(root); !fresh && errors.Is(err, os.ErrNotExist) {
			t.log.Warn("refused: workspace folder is gone", "tenant", k.Tenant, "thread", k.Thread, "path", root)
			return meta.Binding{}, hosts.GoneError(old)
		}
	}
	madeWorkspace, err := makeWorkspace(&undo, root)
	if err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: create workspace: %w", call.KeyName(k), err)
	}
	// The workspace is its jail's user's from the start: what the file
	// API makes before the first command (a new entry takes its folder's
	// owner) is the commands' to change.
	if err := jail.GiveWorkspace(root); err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	// Its home, outside the workspace (home.go): a thread bound before
	// homes gets one here.
	home, _, err := makeHomeOf(&undo, k, root)
	if err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	// The quota holds before the mount serves a single write.
	newSettings := old.Settings
	if settings != nil {
		newSettings = *settings
	}
	if err := t.cfg.Quotas.Apply(k, root, home, newSettings); err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	if madeWorkspace {
		// Its quota group goes before its folders, as at a delete; kept
		// with them (keepFolders).
		undo.pushFolder("forget the quota group of "+root, func() error {
			t.cfg.Quotas.Forget(k, root, home)
			return nil
		})
	}
	// Immutable, with nothing in it: a write while it is not served is
	// refused, and nothing is covered (mountpoint_linux.go).
	if err := t.prepareMountPoint(k, mountPath, &undo); err != nil {
		return meta.Binding{}, fmt.Errorf("bind %s: prepare mount point: %w", call.KeyName(k), err)
	}
	m, err := t.mount(ctx, k, root, mountPath, false)
	if err != nil {
		if found {
			t.setMountErr(k, err)
		}
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	undo.push("unmount "+mountPath, m.Close)

	b := meta.Binding{
		ThreadKey: k,
		Kind:      meta.KindHost,
		HostID:    t.cfg.HostID,
		Root:      root,
		MountPath: mountPath,
		BoundAt:   time.Now().UTC(),
		State:     meta.StateBound,
	}
	switch {
	case settings != nil:
		b.Settings = *settings
	case found:
		b.Settings = old.Settings
	}
	// A thread that moves with its checkpoints gets the last its former
	// host copied, before its binding says it is here: a move that fails
	// is tried again by the next call.
	var movedTo, movedNote string
	if moved && fresh && t.cfg.OnUnreachable == UnreachableRestore {
		if movedTo, movedNote, err = t.deps.History.RestoreMoved(ctx, b, old.HostID); err != nil {
			return meta.Binding{}, fmt.Errorf("bind %s: restore the last copied checkpoint: %w", call.KeyName(k), err)
		}
		fresh = movedTo == ""
	}
	if found {
		b.Revision = old.Revision
		b, err = t.store.UpdateBinding(ctx, b)
	} else {
		b, err = t.store.CreateBinding(ctx, b)
	}
	if err != nil {
		if errors.Is(err, meta.ErrUnavailable) {
			// The write may have been applied all the same: the folder
			// stays, so that a record that did land never points at a
			// folder removed under it (which would read as gone). The
			// mount goes; the retry mounts it again.
			undo.keepFolders()
		}
		return meta.Binding{}, fmt.Errorf("bind %s: write binding: %w", call.KeyName(k), err)
	}

	if err := t.set.add(k, m); err != nil {
		// The record stays "bound": the next start mounts it again. The
		// undo unmounts m.
		return meta.Binding{}, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	undo.done()
	t.log.Info("thread bound", "tenant", k.Tenant, "thread", k.Thread, "path", mountPath, "root", root)
	t.cfg.Events.Emit(api.Event{Type: api.EventThreadBound, Tenant: k.Tenant, Thread: k.Thread, Actor: call.Actor(ctx),
		Message: "mounted at " + mountPath})
	if movedNote != "" {
		t.deps.Jobs.NoteWorkspace(k, movedNote)
		t.cfg.Events.Emit(api.Event{Type: api.EventThreadMoved, Tenant: k.Tenant, Thread: k.Thread, Checkpoint: movedTo, Message: movedNote})
	}
	if fresh && t.cfg.SeedCommand != "" {
		t.seed(ctx, b)
	}
	if moved && !fresh {
		t.deps.History.FinishMoved(ctx, b)
	}
	return b, nil
}

// pinImage pins the image settings name (or the server's default, for
// a new thread that names none) to its digest, pulling it if this
// server lacks it: a thread's image is part of its binding, by digest.
// Settings that keep the thread's image keep its pin. It returns the
// settings to bind with: nil stays nil unless a new thread gets the
// default image.
func (t *Threads) pinImage(ctx context.Context, k meta.ThreadKey, settings *meta.Settings, old *meta.Binding) (*meta.Settings, error) {
	if t.cfg.Images == nil {
		if settings != nil && (settings.Image != "" || settings.ImageDigest != "") {
			return nil, fmt.Errorf("%w: settings: this server has no image store", api.ErrInvalid)
		}
		return settings, nil
	}
	var oldSettings *meta.Settings
	if old != nil {
		oldSettings = &old.Settings
	}
	s := meta.Settings{}
	switch {
	case settings != nil:
		s = *settings
	case old != nil:
		return nil, nil // bound again as it was: its pin stays
	}
	pinned, err := t.cfg.Images.Pin(ctx, s, oldSettings)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", call.KeyName(k), err)
	}
	if settings == nil && pinned.Image == "" {
		return nil, nil
	}
	return &pinned, nil
}

// admitThread takes a slot for k, which is about to be mounted, or
// refuses it past a limit with a message naming the limit (a
// *threadlimit.Refusal: 503 unavailable). A thread mounted already holds
// one. The slot is given back by undo unless the bind succeeds (the
// mount then holds it: threadSet). The thread lock of k must be held.
func (t *Threads) admitThread(k meta.ThreadKey, undo *undoStack) error {
	if t.Mounted(k) {
		return nil
	}
	if err := t.set.admit.Admit(k); err != nil {
		var r *threadlimit.Refusal
		limit := ""
		if errors.As(err, &r) {
			limit = r.Limit
		}
		t.log.Warn("refused: thread limit", "tenant", k.Tenant, "thread", k.Thread, "limit", limit, "error", err)
		return err
	}
	undo.push("give back the thread's slot", func() error {
		t.set.admit.Release(k)
		return nil
	})
	return nil
}

// seed runs the configured seed command in a fresh workspace (one that
// replaced a folder the thread lost in a move). A failure is logged: the
// thread is served anyway, as empty as it is.
func (t *Threads) seed(ctx context.Context, b meta.Binding) {
	k := b.ThreadKey
	if err := t.deps.Jails.Seed(ctx, b, t.cfg.SeedCommand); err != nil {
		t.log.Error("seed a fresh workspace", "tenant", k.Tenant, "thread", k.Thread, "command", t.cfg.SeedCommand, "error", err)
		return
	}
	t.log.Info("fresh workspace seeded", "tenant", k.Tenant, "thread", k.Thread, "command", t.cfg.SeedCommand)
}

// resettle gives bound thread b new settings. The thread lock must be held.
func (t *Threads) resettle(ctx context.Context, b meta.Binding, s meta.Settings) (meta.Binding, error) {
	// A running jail whose network or limits would change is not
	// restarted behind its commands' backs.
	applyToJail, err := t.deps.Jails.Resettle(b.ThreadKey, s)
	if err != nil {
		return meta.Binding{}, err
	}
	// A new quota applies at once, to the running jail too: the
	// filesystem enforces it, not the jail.
	k, oldSettings := b.ThreadKey, b.Settings
	quotaChanged := t.cfg.Quotas.DiskBytes(s) != t.cfg.Quotas.DiskBytes(oldSettings)
	var root, home string
	if quotaChanged {
		var err error
		if root, err = t.RootOf(b); err != nil {
			return meta.Binding{}, fmt.Errorf("settings of %s: %w", call.KeyName(k), err)
		}
		if home, _, err = makeHomeOf(nil, k, root); err != nil {
			return meta.Binding{}, fmt.Errorf("settings of %s: %w", call.KeyName(k), err)
		}
		if err := t.cfg.Quotas.Apply(k, root, home, s); err != nil {
			return meta.Binding{}, fmt.Errorf("settings of %s: %w", call.KeyName(k), err)
		}
	}
	b.Settings = s
	b, err = t.store.UpdateBinding(ctx, b)
	if err != nil {
		if quotaChanged {
			if qerr := t.cfg.Quotas.Apply(k, root, home, oldSettings); qerr != nil {
				t.log.Warn("restore the former disk quota", "tenant", k.Tenant, "thread", k.Thread, "error", qerr)
			}
		}
		return meta.Binding{}, fmt.Errorf("settings of %s: write binding: %w", call.KeyName(k), err)
	}
	applyToJail()
	t.log.Info("thread settings changed", "tenant", b.Tenant, "thread", b.Thread, "settings", fmt.Sprintf("%+v", s))
	return b, nil
}

// mount serves root at mountPath for thread k.
func (t *Threads) mount(ctx context.Context, k meta.ThreadKey, root, mountPath string, readOnly bool) (io.Closer, error) {
	return t.Mount(ctx, k, root, mountPath, readOnly, nil)
}

// Mount serves root at mountPath for thread k (an inspection mount too),
// onto target if not nil, which mountPath then only names
// (fs.Options.Target).
func (t *Threads) Mount(ctx context.Context, k meta.ThreadKey, root, mountPath string, readOnly bool, target *fs.Target) (io.Closer, error) {
	log := t.log.Named("fs").With("tenant", k.Tenant, "thread", k.Thread, "mount_path", mountPath)
	opts := fs.Options{
		Name:     k.Tenant + "/" + k.Thread,
		ReadOnly: readOnly,
		Logger:   log,
		Hub:      t.cfg.Hub,
		// Inspection mounts too: an escape through them is the thread's.
		OnRefusal:   t.cfg.Events.OnRefusal(k),
		OnStale:     t.cfg.Events.OnStale(k),
		OnChange:    t.cfg.Events.OnChange(k),
		WantChanges: func() bool { return t.cfg.Events.Wants(k) },
		Target:      target,
		Transport:   t.cfg.Transport,
		// The daemon opens no file of its mounts (fs/doc.go).
		NoPollHack: true,
	}
	m, err := t.mounter.Mount(ctx, root, mountPath, opts)
	if err != nil {
		return nil, fmt.Errorf("mount %s at %s: %w", root, mountPath, err)
	}
	return m, nil
}

// Mounted reports whether this daemon serves k's mount.
func (t *Threads) Mounted(k meta.ThreadKey) bool { return t.set.mounted(k) }

// setMountErr remembers why k could not be mounted, for ThreadInfo.
func (t *Threads) setMountErr(k meta.ThreadKey, err error) { t.set.setErr(k, err) }

// putMount keeps k's mount m, unless the gateway unmounted everything
// already: then m is unmounted here, as unmountAll would have done.
func (t *Threads) putMount(k meta.ThreadKey, m io.Closer) {
	if t.set.put(k, m) {
		return
	}
	if err := m.Close(); err != nil {
		t.log.Error("unmount at shutdown", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	}
}

// unmountThread unmounts k's mount, if it has one, putting it back into the
// map if that fails. The thread lock of k must be held.
func (t *Threads) unmountThread(k meta.ThreadKey, mountPath string) error {
	// The jail holds the mount (bound at /workspace in its namespace):
	// it goes first, with every command and job in it.
	t.deps.Jails.CloseJail(k)
	t.deps.Jobs.EndThread(k)
	m := t.set.take(k)
	if m == nil {
		return nil
	}
	if err := m.Close(); err != nil {
		t.putMount(k, m)
		t.log.Warn("refused: unmount failed", "tenant", k.Tenant, "thread", k.Thread, "path", mountPath, "error", err)
		return fmt.Errorf("unmount %s: %w", mountPath, call.Busy(err))
	}
	return nil
}

// TakeDown ends thread k's jail, its jobs and its mount, under the
// thread's lock, unless still (when set) says otherwise once the lock is
// held. It keeps the thread's records. It says whether it took k down.
// ctx bounds the wait for the lock and still's store calls: a fence ends
// it when the gateway closes, so Close does not wait behind a thread lock
// that a cut-off request holds.
func (t *Threads) TakeDown(ctx context.Context, k meta.ThreadKey, still func(context.Context) bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return false, err
	}
	defer unlock()
	if still != nil && !still(ctx) {
		return false, nil
	}
	_, mountPath, err := t.Paths(k)
	if err != nil {
		return false, err
	}
	if err := t.unmountThread(k, mountPath); err != nil {
		return false, err
	}
	return true, nil
}

// info adds the in-memory mount state to b.
func (t *Threads) info(b meta.Binding) api.ThreadInfo {
	ti := api.ThreadInfo{Binding: b}
	var err error
	ti.Mounted, err = t.set.state(b.ThreadKey)
	if err != nil {
		ti.Error = err.Error()
	}
	return ti
}

// Show returns k's binding without binding it.
func (t *Threads) Show(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	b, err := t.store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return api.ThreadInfo{}, fmt.Errorf("%w: thread %s is not bound", api.ErrNotFound, call.KeyName(k))
	}
	if err != nil {
		return api.ThreadInfo{}, fmt.Errorf("read binding of %s: %w", call.KeyName(k), err)
	}
	ti := t.info(b)
	ti.Owner = t.deps.Hosts.Owner(ctx, b)
	return ti, nil
}

// List lists a page of at most limit bindings, of one tenant if
// tenant is not nil, after the key after if it is not nil, and returns
// the cursor of the next page ("" on the last). It reads limit bindings
// and their pins, however many threads the store holds, and takes no lock
// of the daemon's over the reads (info takes the thread set's briefly,
// per binding, after them).
func (t *Threads) List(ctx context.Context, tenant *string, after *meta.ThreadKey, limit int) ([]api.ThreadInfo, string, error) {
	if tenant != nil && *tenant == "" {
		def := api.DefaultTenant
		tenant = &def
	}
	if tenant != nil && after != nil && after.Tenant != *tenant {
		// A cursor of another listing would start this one anywhere.
		return nil, "", fmt.Errorf("%w: the cursor is not of tenant %s's listing", api.ErrInvalid, call.Quote(*tenant))
	}
	bs, more, err := t.store.ListBindingsPage(ctx, tenant, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list bindings: %w", err)
	}
	out := make([]api.ThreadInfo, len(bs))
	for i, b := range bs {
		out[i] = t.info(b)
		out[i].Owner = t.deps.Hosts.Owner(ctx, b)
	}
	var next string
	if more {
		next = EncodeCursor(bs[len(bs)-1].ThreadKey)
	}
	return out, next, nil
}

// CloseThread unmounts k and records it as closed, keeping its folder. A
// closed thread is bound again by the next call that needs it.
func (t *Threads) CloseThread(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	return t.CloseWith(ctx, tenant, thread, "closed; the folder is kept")
}

// CloseWith is CloseThread, with why as its event's message.
func (t *Threads) CloseWith(ctx context.Context, tenant, thread, why string) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return api.ThreadInfo{}, fmt.Errorf("close %s: %w", call.KeyName(k), err)
	}
	defer unlock()

	b, err := t.store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return api.ThreadInfo{}, fmt.Errorf("close %s: %w: thread is not bound", call.KeyName(k), api.ErrNotFound)
	}
	if err != nil {
		return api.ThreadInfo{}, fmt.Errorf("close %s: read binding: %w", call.KeyName(k), err)
	}
	if b.State == meta.StateDeleting {
		return api.ThreadInfo{}, fmt.Errorf("close %s: %w", call.KeyName(k), deletingError(k))
	}
	if err := t.deps.Hosts.Claim(ctx, k, &b); err != nil {
		return api.ThreadInfo{}, err
	}
	// Running jobs keep the jail and the mount until they end
	// (closeIdle); the record says closed at once.
	if n := t.deps.Jobs.Running(k); n > 0 {
		t.deps.Jobs.SetClosing(k, true)
		t.log.Info("thread closed while jobs run: its jail and mount stay until they end", "tenant", k.Tenant, "thread", k.Thread, "jobs", n)
	} else if err := t.unmountThread(k, b.MountPath); err != nil {
		return api.ThreadInfo{}, fmt.Errorf("close %s: %w", call.KeyName(k), err)
	}
	// Its channels go with it, whether its jail ended or stays for its
	// jobs.
	if t.deps.Ports != nil {
		t.deps.Ports.CloseThread(k)
	}
	if b.State != meta.StateClosed {
		b.State = meta.StateClosed
		b.ClosedAt = time.Now().UTC()
		// If this write fails the record still says bound with no mount,
		// which the next call repairs by mounting again.
		if b, err = t.store.UpdateBinding(ctx, b); err != nil {
			return api.ThreadInfo{}, fmt.Errorf("close %s: write binding: %w", call.KeyName(k), err)
		}
		// Only here: closing a closed thread changes nothing.
		t.cfg.Events.Emit(api.Event{Type: api.EventThreadClosed, Tenant: k.Tenant, Thread: k.Thread, Actor: call.Actor(ctx),
			Message: why})
	}
	t.log.Info("thread closed", "tenant", k.Tenant, "thread", k.Thread, "path", b.MountPath)
	return t.info(b), nil
}

// Delete unmounts k and its inspection mounts, removes its folder and
// then its records. The delete is recorded first (state deleting): from
// then on the thread is never served again, and a delete cut short (a
// failed unmount, a crash) is finished by the next delete or the next
// start (finishDeletes). The steps run in an order that a retry can
// finish: the record goes last.
func (t *Threads) Delete(ctx context.Context, tenant, thread string) error {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return err
	}
	// No checkpoint or restore of the thread runs meanwhile: none
	// records a history for a thread deleted under it.
	cpUnlock, err := t.set.turns.Lock(ctx, k)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	defer cpUnlock()
	unlock, err := t.set.locks.Lock(ctx, k)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	defer unlock()

	b, err := t.store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("delete %s: %w: thread is not bound", call.KeyName(k), api.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete %s: read binding: %w", call.KeyName(k), err)
	}
	if err := t.deps.Hosts.Claim(ctx, k, &b); err != nil {
		return err
	}
	return t.deleteLocked(ctx, b)
}

// deleteLocked deletes thread b, recording the delete first unless it is
// recorded already. The thread lock must be held (or the API not serve
// yet), and b's pin claimed.
func (t *Threads) deleteLocked(ctx context.Context, b meta.Binding) error {
	k := b.ThreadKey
	// A path read from the store is removed only if it is a workspace
	// root of these ids (rootOf); else the ids' own root here is.
	_, mountPath, err := t.Paths(k)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	root, err := t.RootOf(b)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	if b.State != meta.StateDeleting {
		b.State = meta.StateDeleting
		if b, err = t.store.UpdateBinding(ctx, b); err != nil {
			return fmt.Errorf("delete %s: record the delete: %w", call.KeyName(k), err)
		}
	}

	inspections, err := t.deps.Inspections.UnmountAllOf(ctx, k)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	t.deps.Jobs.NoteStopping(k, "its thread was deleted")
	if err := t.unmountThread(k, mountPath); err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	// A mount a crashed run left there (restore detached every one, but
	// a delete may also follow a failed mount).
	if err := t.mounter.DetachStale(mountPath); err != nil {
		return fmt.Errorf("delete %s: detach stale mount %s: %w", call.KeyName(k), mountPath, err)
	}
	// The thread's quota group goes before its subvolumes, which it needs
	// to be found; then its home, then its workspace, so a delete cut
	// short and done again still finds the group while there is one.
	home, err := homeOf(root, k)
	if err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	t.cfg.Quotas.Forget(k, root, home)
	// os.RemoveAll works fd-relative and does not follow links, so a link
	// planted in the workspace or the home cannot make it remove anything
	// outside.
	if err := removeHome(home); err != nil {
		return fmt.Errorf("delete %s: remove home %s: %w", call.KeyName(k), home, err)
	}
	if err := removeWorkspace(ctx, root); err != nil {
		return fmt.Errorf("delete %s: remove workspace %s: %w", call.KeyName(k), root, err)
	}
	if err := removeMountPoint(mountPath); err != nil {
		return fmt.Errorf("delete %s: remove mount point %s: %w", call.KeyName(k), mountPath, err)
	}
	for _, p := range inspections {
		if err := t.store.DeleteInspectionMount(ctx, p); err != nil {
			return fmt.Errorf("delete %s: forget inspection mount %s: %w", call.KeyName(k), p, err)
		}
	}
	if err := t.store.DeleteJobs(ctx, k); err != nil {
		return fmt.Errorf("delete %s: delete job records: %w", call.KeyName(k), err)
	}
	if err := t.deps.History.DropHistory(ctx, k); err != nil {
		return fmt.Errorf("delete %s: %w", call.KeyName(k), err)
	}
	if err := t.store.DeleteBinding(ctx, k, b.Revision); err != nil {
		return fmt.Errorf("delete %s: delete binding: %w", call.KeyName(k), err)
	}
	// The last record: a failure leaves a pin that runs out with this
	// host's lease, and holds no thread.
	t.deps.Hosts.Forget(ctx, k)
	t.set.forget(k)
	t.log.Info("thread deleted", "tenant", k.Tenant, "thread", k.Thread, "path", mountPath, "root", root)
	t.cfg.Events.Emit(api.Event{Type: api.EventThreadDeleted, Tenant: k.Tenant, Thread: k.Thread, Actor: call.Actor(ctx),
		Message: "workspace folder and records removed"})
	return nil
}

// deletingError is the answer for a thread whose delete is under way or
// was cut short: gone, as it will be.
func deletingError(k meta.ThreadKey) error {
	return fmt.Errorf("%w: thread %s is being deleted (delete it again to finish a delete that was cut short)", api.ErrGone, call.KeyName(k))
}

// makeLeaf creates path (its parent is created as needed and kept) and, if
// it made it, registers its removal on undo and says so. Only the leaf is
// undone: a tenant folder may be shared by a concurrent bind of another
// thread.
func makeLeaf(undo *undoStack, path string, perm os.FileMode) (made bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	err = os.Mkdir(path, perm)
	if errors.Is(err, os.ErrExist) {
		fi, statErr := os.Lstat(path)
		if statErr != nil {
			return false, fmt.Errorf("check %s: %w", path, statErr)
		}
		if !fi.IsDir() {
			return false, fmt.Errorf("%s exists and is not a folder", path)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create %s: %w", path, err)
	}
	undo.pushFolder("remove "+path, func() error { return os.Remove(path) })
	return true, nil
}

// undoStack collects the steps that take back a half-done operation. run
// performs them in reverse unless done was called.
type undoStack struct {
	steps []undoStep
	ok    bool
}

type undoStep struct {
	what   string
	fn     func() error
	folder bool // removes a folder it made
}

func (u *undoStack) push(what string, fn func() error) {
	u.steps = append(u.steps, undoStep{what: what, fn: fn})
}

// pushFolder is push for the removal of a folder it made (keepFolders).
func (u *undoStack) pushFolder(what string, fn func() error) {
	u.steps = append(u.steps, undoStep{what: what, fn: fn, folder: true})
}

// keepFolders keeps the folders made, while the other steps are still
// taken back.
func (u *undoStack) keepFolders() {
	steps := u.steps[:0]
	for _, s := range u.steps {
		if !s.folder {
			steps = append(steps, s)
		}
	}
	u.steps = steps
}

// done keeps the work: run does nothing after it.
func (u *undoStack) done() { u.ok = true }

func (u *undoStack) run(log interface {
	Warn(msg string, args ...any)
}) {
	if u.ok {
		return
	}
	for i := len(u.steps) - 1; i >= 0; i-- {
		if err := u.steps[i].fn(); err != nil {
			log.Warn("undo failed", "step", u.steps[i].what, "error", err)
		}
	}
}
