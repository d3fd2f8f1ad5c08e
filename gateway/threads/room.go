package threads

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/hosts"
	"warren/gateway/quota"
	"warren/gateway/remount"
	"warren/gateway/threadlimit"
	"warren/meta"
)

// What a daemon does with a thread it takes over whose folder it cannot
// reach (Config.OnUnreachable).
const (
	UnreachableGone  = "gone"
	UnreachableFresh = "fresh"
	// UnreachableRestore restores the newest checkpoint of the thread
	// that its former host copied to the snapshot store; a thread with
	// none starts afresh.
	UnreachableRestore = "restore"
)

// Config is what the threads need of the daemon.
type Config struct {
	Store  meta.Store
	Logger hclog.Logger
	// HostID is this daemon's host id ("" pins nothing); OnUnreachable
	// says what a thread taken over from another host becomes when its
	// folder cannot be reached (UnreachableGone or UnreachableFresh), and
	// SeedCommand runs in a fresh one.
	HostID string
	// AllowNetworks are the jail networks a thread may ask for (none,
	// egress, host).
	AllowNetworks []string
	OnUnreachable string
	SeedCommand   string
	// DataDir holds moved-aside/ and orphans/; WorkspacesDir the backing
	// folders, MountsDir the mount points (both made by the daemon).
	DataDir, WorkspacesDir, MountsDir string
	// Mounter serves the mounts; Hub joins them (package fs); Transport
	// is the FUSE transport of every mount.
	Mounter   Mounter
	Hub       *fs.Hub
	Transport fs.Transport
	// Admit holds a slot for each mounted thread (package threadlimit).
	Admit *threadlimit.Admitter
	// Quotas bound each workspace.
	Quotas *quota.Quotas
	// Events tells what happens to threads, and takes the refusals and
	// changes of their mounts (package events).
	Events Events
	// Metrics counts the fences.
	Metrics Metrics
	// MaxCheckpoints bounds a thread's checkpoints setting (package
	// checkpoints keeps them).
	MaxCheckpoints int
	// Images pins the image a thread's settings name (package images);
	// nil refuses every image.
	Images Images
	// RemountGate, if not nil, holds the background restore until it is
	// closed: a seam for the daemon's tests.
	RemountGate <-chan struct{}
}

// Images pins a thread's image at its bind: the reference normalised,
// the digest set, the image in the store (package images). old are the
// settings the thread had, nil for a new thread.
type Images interface {
	Pin(ctx context.Context, s meta.Settings, old *meta.Settings) (meta.Settings, error)
}

// Events is where the threads' events go, and what their mounts call
// (package events' Bus).
type Events interface {
	Emit(api.Event)
	Wants(k meta.ThreadKey) bool
	OnRefusal(k meta.ThreadKey) func(fs.Refusal)
	OnStale(k meta.ThreadKey) func(fs.Stale)
	OnChange(k meta.ThreadKey) func(fs.EntryChange)
}

// Metrics counts what the threads do that the metrics show.
type Metrics interface {
	Fenced(threads int)
}

// The rooms above the threads keep something of a thread besides its
// binding and mount: its jail and commands, its jobs, its inspection
// mounts, its history. A thread's close, delete and move let them go or
// finish, in the order the promises need; each is a small interface of
// exactly what the threads call, which the daemon wires with Attach.

// Jails is what the threads call of the jails (package jails).
type Jails interface {
	// CloseJail ends k's jail and every command in it.
	CloseJail(k meta.ThreadKey)
	// Seed runs script in k's jail (started if need be) and says how it
	// ended; the thread lock of k is held.
	Seed(ctx context.Context, b meta.Binding, script string) error
	// Resettle checks that k's running jail, if any, can take settings s
	// without a restart; apply records s as its settings once the
	// binding has them.
	Resettle(k meta.ThreadKey, s meta.Settings) (apply func(), err error)
}

// Jobs is what the threads call of the jobs (package jobs).
type Jobs interface {
	// Running counts k's jobs on this daemon (and those being started).
	Running(k meta.ThreadKey) int
	// SetClosing marks k as closed while its jobs run, or not.
	SetClosing(k meta.ThreadKey, closing bool)
	// NoteStopping tells k's jobs and commands why their jail is about
	// to end.
	NoteStopping(k meta.ThreadKey, why string)
	// EndThread waits for k's jobs to end and forgets them; their jail
	// is closed already.
	EndThread(k meta.ThreadKey)
	// NoteMoved and NoteRestarted note the jobs another host, or this
	// host's former run, left running.
	NoteMoved(ctx context.Context, k meta.ThreadKey)
	NoteRestarted(ctx context.Context, bs []meta.Binding)
	// NoteWorkspace keeps a note on k's workspace for the model: the
	// next command's answer carries it, once.
	NoteWorkspace(k meta.ThreadKey, note string)
}

// Inspections is what the threads call of the inspection mounts
// (package inspect).
type Inspections interface {
	// UnmountAllOf unmounts k's inspection mounts and returns their
	// paths, whose records the delete removes last.
	UnmountAllOf(ctx context.Context, k meta.ThreadKey) ([]string, error)
	// DetachStale detaches what a former run left mounted at path.
	DetachStale(path string) error
}

// History is what the threads call of the checkpoints (package
// checkpoints).
type History interface {
	// FinishRestore finishes a checkpoint restore a crash cut short; the
	// thread lock of k is held.
	FinishRestore(ctx context.Context, k meta.ThreadKey, b meta.Binding) error
	// FinishMoved restores a thread taken over from another host.
	FinishMoved(ctx context.Context, b meta.Binding)
	// RestoreMoved restores into b's workspace the newest checkpoint of
	// a thread taken over from host from that is in the snapshot store
	// (UnreachableRestore), and returns it with the note for the model;
	// "" if there is none.
	RestoreMoved(ctx context.Context, b meta.Binding, from string) (checkpoint, note string, err error)
	// DropHistory removes k's history, for its delete.
	DropHistory(ctx context.Context, k meta.ThreadKey) error
}

// Deps are the rooms the threads call that are made after them (see
// Attach): the hosts, whose lease fences the threads (Fence), and the
// rooms above.
type Deps struct {
	// Hosts pins each thread served (package hosts).
	Hosts       *hosts.Hosts
	Jails       Jails
	Jobs        Jobs
	Inspections Inspections
	History     History
	// Ports, if set, closes the channels into a thread's jail when the
	// thread is closed (package ports), even while its jobs keep the
	// jail.
	Ports Ports
}

// Ports is what the threads call of the ports' channels (package ports).
type Ports interface {
	// CloseThread closes k's channels.
	CloseThread(k meta.ThreadKey)
}

// Threads is the threads this daemon serves: their bindings, locks,
// workspaces and mounts. New makes one; Attach wires the rooms above it;
// Close refuses new mounts and Drain hands over the ones left, which the
// caller unmounts.
type Threads struct {
	// Set by New, never changed.
	cfg     Config
	log     hclog.Logger
	store   meta.Store
	mounter Mounter
	wsBase  string // Config.WorkspacesDir: backing roots
	mntBase string // Config.MountsDir: mount points
	sealOff bool   // mount points cannot be made immutable here (mountpoint_linux.go)

	// deps are the rooms above, set by Attach before anything is served.
	deps Deps
	// remounts is the threads' part of the start's restore, done in the
	// background once the API serves (restore.go, package remount); set
	// by Restore, never nil after it. It owns its workers; StopRestore
	// and EndRestore stop and wait for them.
	remounts *remount.Queue[meta.ThreadKey]

	// set holds the locks and the mounts (its fields say their guards).
	set threadSet
}

// New makes the threads of cfg; it probes whether mount points can be
// sealed (mountpoint_linux.go). The mount folder must exist.
func New(cfg Config) *Threads {
	t := &Threads{
		cfg: cfg, log: cfg.Logger, store: cfg.Store, mounter: cfg.Mounter,
		wsBase: cfg.WorkspacesDir, mntBase: cfg.MountsDir,
		set: threadSet{mounts: make(map[meta.ThreadKey]*threadMount), admit: cfg.Admit},
	}
	t.probeSeal()
	return t
}

// Attach wires the hosts and the rooms above the threads. Call it once, after they are
// made and before Restore or the API serves.
func (t *Threads) Attach(d Deps) { t.deps = d }

// Close refuses new mounts from now on: a bind under way is refused
// (api.ErrClosed) and undoes what it made.
func (t *Threads) Close() { t.set.close() }

// Drain empties the set of mounts, refuses mounts put back from now on,
// and returns the mounts it held, by thread, for the caller to unmount.
func (t *Threads) Drain() map[meta.ThreadKey]io.Closer { return t.set.drain() }

// Lock takes the thread lock of k (see the package's lock order); call
// unlock exactly once.
func (t *Threads) Lock(ctx context.Context, k meta.ThreadKey) (unlock func(), err error) {
	return t.set.locks.Lock(ctx, k)
}

// LockTurn takes the turn lock of k, which serializes its checkpoints,
// restores and delete; it is taken before the thread lock when both are.
func (t *Threads) LockTurn(ctx context.Context, k meta.ThreadKey) (unlock func(), err error) {
	return t.set.turns.Lock(ctx, k)
}

// Locks counts the thread locks held or waited for: each goes when nobody
// holds or waits for it, so that idle threads cost no lock.
func (t *Threads) Locks() int { return t.set.locks.Size() }

// Serving says whether the threads take new mounts (Close has not run).
func (t *Threads) Serving() bool {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	return !t.set.closed
}

// Headroom says what is left of each limit of admission.
func (t *Threads) Headroom() threadlimit.Headroom { return t.set.admit.Headroom() }

// Counts returns how many threads are mounted, and how many are bound
// here with a failed mount.
func (t *Threads) Counts() (mounted, failed int) { return t.set.counts() }

// RestoreLeft is how many threads the background restore has yet to
// serve again; RestoreDone is closed once it ended.
func (t *Threads) RestoreLeft() int             { return t.remounts.Left() }
func (t *Threads) RestoreDone() <-chan struct{} { return t.remounts.Done() }

// StartRestore starts the background restore's workers, once the API
// serves; StopRestore makes it take no more threads, and EndRestore ends
// the one under way and waits for its workers.
func (t *Threads) StartRestore() { t.remounts.Start() }
func (t *Threads) StopRestore()  { t.remounts.Stop() }
func (t *Threads) EndRestore()   { t.remounts.Close() }

// Touch notes that a call changed or used thread k (the idle reclaim).
func (t *Threads) Touch(k meta.ThreadKey) { t.set.touch(k) }

// Use is what the idle reclaim reads of a mounted thread: its mount's
// requests so far (0 if the mount does not count them) and when a call
// last touched it.
type Use struct {
	Key      meta.ThreadKey
	Requests uint64
	Touched  time.Time
}

// Uses lists the mounted threads with their use.
func (t *Threads) Uses() []Use {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	var us []Use
	for k, tm := range t.set.mounts {
		if tm.mount == nil {
			continue
		}
		u := Use{Key: k, Touched: tm.touched}
		if r, ok := tm.mount.(interface{ Requests() uint64 }); ok {
			u.Requests = r.Requests()
		}
		us = append(us, u)
	}
	return us
}

// Requests returns the FUSE requests k's mount served, and whether k is
// mounted with a mount that counts them.
func (t *Threads) Requests(k meta.ThreadKey) (uint64, bool) {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	if tm := t.set.mounts[k]; tm != nil && tm.mount != nil {
		if r, ok := tm.mount.(interface{ Requests() uint64 }); ok {
			return r.Requests(), true
		}
	}
	return 0, false
}

// Name names thread k for logs when its paths are not at hand: its mount
// path, or its ids quoted.
func (t *Threads) Name(k meta.ThreadKey) string {
	p, err := WorkspaceRoot(t.mntBase, k.Tenant, k.Thread)
	if err != nil {
		return fmt.Sprintf("%q/%q", k.Tenant, k.Thread)
	}
	return p
}
