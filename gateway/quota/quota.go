package quota

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/diskquota"
	"warren/meta"
)

// Package quota is the room of the workspaces' disk quotas
// (docs/operations.md, "Disk quotas and the reserve"). The
// kernel enforces them, with btrfs quota groups (package diskquota): a
// thread's workspace folder and its home folder are subvolumes whose
// thread's group has a limit, so every write into either past the limit
// gets EDQUOT, the daemon's and the passthrough writes the kernel makes
// for a jail alike; and all workspaces and homes together are limited so
// that Config.ReserveBytes of the disk stay free for the metadata store
// and everything else.
//
// On btrfs every new workspace and home folder is a subvolume, quota or
// not, so that a quota can be given later. A quota or reserve the
// workspaces' filesystem cannot enforce is an error (at start for the
// daemon's defaults, at bind for a thread's setting), never a silent
// no-op.
//
// It owns its hold on the quota groups (Quotas) and its lock, a leaf
// held across opening the filesystem's quotas once; it calls no other
// room. Threads apply a thread's quota at its bind (Apply) and drop its
// group at its delete (Forget), checkpoints make their repositories
// through it (MakeRepoFolder, Checkpointed).

// MinDiskBytes is the smallest quota a thread may get: below it a jail
// cannot even write a shell's history.
const MinDiskBytes = 1 << 20

// Config is what the quotas need of the daemon's configuration.
type Config struct {
	// WorkspacesDir holds the workspace folders.
	WorkspacesDir string
	// StoreDir is the metadata store's folder: a reserve below
	// StoreFreeBytes on its disk is warned about.
	StoreDir       string
	StoreFreeBytes int64
	// QuotaBytes is a thread's default quota, ReserveBytes the space
	// kept free for the rest; 0 is none.
	QuotaBytes, ReserveBytes int64
	Logger                   hclog.Logger
}

// Quotas is the daemon's hold on the workspaces' quota groups. Start
// makes one; it holds no goroutine and needs no Close.
type Quotas struct {
	cfg Config // never changed
	log hclog.Logger

	mu sync.Mutex
	fs *diskquota.FS // nil until quotas are needed; guarded by mu
}

// quotaFS returns the workspaces' filesystem with quotas on, turning them
// on at its first call.
func (q *Quotas) quotaFS() (*diskquota.FS, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fs != nil {
		return q.fs, nil
	}
	fs, err := diskquota.Open(q.cfg.WorkspacesDir)
	if err != nil {
		return nil, err
	}
	q.fs = fs
	return fs, nil
}

// Start checks at start that the workspaces' filesystem enforces the
// default quota and the reserve, if they are set, and sets the reserve.
// A limit no flag asks for any more is lifted: the reserve an earlier run
// left on all workspaces together (quota groups outlive the daemon; after
// a full disk that limit is a byte, and would stop every thread), here;
// a thread's own quota at its bind (Apply).
func Start(cfg Config) (*Quotas, error) {
	q := &Quotas{cfg: cfg, log: cfg.Logger}
	if cfg.QuotaBytes == 0 && cfg.ReserveBytes == 0 {
		return q, q.setReserve()
	}
	if _, err := q.quotaFS(); err != nil {
		return nil, fmt.Errorf("disk quota %d and reserve %d bytes: workspaces folder %s: %w",
			cfg.QuotaBytes, cfg.ReserveBytes, cfg.WorkspacesDir, err)
	}
	if r, need := cfg.ReserveBytes, cfg.StoreFreeBytes; r > 0 && r < need && sameDisk(cfg.WorkspacesDir, cfg.StoreDir) {
		q.log.Warn("the disk reserve is below what the metadata store on the same disk keeps free; full workspaces will stop its writes",
			"reserve", r, "store_needs", need)
	}
	return q, q.setReserve()
}

// setReserve limits all workspaces (and the snapshot repositories on
// their disk) together so that the reserve stays free, from the disk's
// state now; with no reserve it lifts a limit an earlier run set, where
// quotas are on.
func (q *Quotas) setReserve() error {
	if q.cfg.ReserveBytes == 0 && !diskquota.Enabled(q.cfg.WorkspacesDir) {
		return nil
	}
	fs, err := q.quotaFS()
	if err != nil {
		return fmt.Errorf("disk reserve: lift the limit of an earlier run: %w", err)
	}
	limit, err := fs.Reserve(q.cfg.ReserveBytes)
	if err != nil {
		return fmt.Errorf("disk reserve: %w", err)
	}
	q.log.Debug("workspaces limited to keep the disk reserve", "reserve", q.cfg.ReserveBytes, "limit", limit)
	return nil
}

// MakeRepoFolder makes dir, a tenant's snapshot repository, if it is not
// there: a btrfs subvolume where the snapshots folder is on btrfs, so
// that it can count in the reserve like a workspace. Where the reserve or
// quotas are in force on the workspaces' disk and dir is on it, dir joins
// their quota group: the kernel then refuses a checkpoint's objects past
// the reserve (EDQUOT) as it refuses a workspace's writes. A repository
// made as a plain folder, by an older warren, cannot join; it is counted
// through the disk's free space each time the reserve is set again
// (after each of its checkpoints, Checkpointed).
func (q *Quotas) MakeRepoFolder(dir string) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", parent, err)
	}
	if btrfs, err := diskquota.IsBtrfs(parent); err != nil || !btrfs {
		return err
	}
	if err := diskquota.MakeSubvolume(dir); err == nil {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	} else if !errors.Is(err, os.ErrExist) {
		return err
	}
	if q.cfg.ReserveBytes == 0 && q.cfg.QuotaBytes == 0 || !diskquota.SameFilesystem(dir, q.cfg.WorkspacesDir) {
		return nil
	}
	sub, err := diskquota.IsSubvolume(dir)
	if err != nil {
		return err
	}
	if !sub {
		q.log.Warn("a snapshot repository made as a plain folder cannot join the workspaces' quota group; the reserve counts it through the disk's free space",
			"folder", dir)
		return nil
	}
	fs, err := q.quotaFS()
	if err != nil {
		return fmt.Errorf("count snapshots %s in the disk reserve: %w", dir, err)
	}
	if err := fs.Join(dir); err != nil {
		return fmt.Errorf("count snapshots %s in the disk reserve: %w", dir, err)
	}
	return nil
}

// Checkpointed sets the reserve again after a checkpoint wrote objects, so
// that a repository outside the quota group (a plain folder, or on btrfs
// with quotas at their defaults) leaves the reserve free: its bytes left
// the disk's free space, which the limit follows.
func (q *Quotas) Checkpointed(k meta.ThreadKey) {
	if q.cfg.ReserveBytes == 0 {
		return
	}
	if err := q.setReserve(); err != nil {
		q.log.Warn("set the disk reserve again after a checkpoint", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	}
}

// sameDisk says whether a and b are on one filesystem (false if either
// cannot be read).
func sameDisk(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// DiskBytes is the quota of a thread with settings s; 0 is none.
func (q *Quotas) DiskBytes(s meta.Settings) int64 {
	return cmp.Or(s.DiskBytes, q.cfg.QuotaBytes)
}

// Apply gives thread k its quota from settings s, over its workspace
// folder root and its home folder home together, and counts both in the
// reserve (diskquota.LimitThread). A thread with no quota on a gateway
// with no reserve needs nothing, unless its workspace is a subvolume and
// quotas are on: a limit of an earlier run or setting is then lifted.
// What cannot be enforced is an error.
//
// A thread bound before threads had homes has its limit on its
// workspace's own quota group; its home is made at its next mount, and
// this call then moves the limit onto the thread's group, which holds
// both. Its workspace has data when it joins that group: the kernel adds
// its bytes at once if they are all its own, else a rescan counts them
// again in the background.
func (q *Quotas) Apply(k meta.ThreadKey, root, home string, s meta.Settings) error {
	bytes, reserve := q.DiskBytes(s), q.cfg.ReserveBytes
	sub, err := diskquota.IsSubvolume(root)
	if err != nil {
		return fmt.Errorf("disk quota of thread %s: %w", call.KeyName(k), err)
	}
	if bytes == 0 && reserve == 0 && (!sub || !diskquota.Enabled(root)) {
		return nil // nothing asked, and no limit to lift
	}
	fs, err := q.quotaFS()
	if err != nil {
		return fmt.Errorf("%w: disk quota of %d bytes for thread %s: workspaces folder %s cannot enforce it: %w",
			api.ErrInvalid, bytes, call.KeyName(k), q.cfg.WorkspacesDir, err)
	}
	// Something is asked (a plain folder with nothing asked returned
	// above), and a plain folder cannot have it.
	for _, f := range []struct{ what, path string }{{"workspace", root}, {"home", home}} {
		if f.path == "" {
			continue
		}
		sub, err := diskquota.IsSubvolume(f.path)
		if err != nil {
			return fmt.Errorf("disk quota of thread %s: %w", call.KeyName(k), err)
		}
		if !sub {
			return fmt.Errorf("%w: disk quota of %d bytes and reserve of %d for thread %s: its %s %s was made as a plain folder, before quotas; the filesystem cannot bound it",
				api.ErrInvalid, bytes, reserve, call.KeyName(k), f.what, f.path)
		}
	}
	if err := fs.LimitThread(root, home, bytes); err != nil {
		return fmt.Errorf("disk quota of thread %s: %w", call.KeyName(k), err)
	}
	// The disk may have changed since the last bind (files of other
	// programs): the reserve is set again from its state now.
	return q.setReserve()
}

// Forget removes thread k's quota group, before its delete removes its
// workspace folder root and its home folder home (diskquota.ForgetThread
// says why it must be before). A group it cannot remove is left, with a
// warning: it holds no bytes once the folders are gone, and a later
// thread whose workspace gets the same subvolume id takes it over with
// its own limit.
func (q *Quotas) Forget(k meta.ThreadKey, root, home string) {
	if !diskquota.Enabled(root) {
		return
	}
	fs, err := q.quotaFS()
	if err == nil {
		err = fs.ForgetThread(root, home)
	}
	if err != nil {
		q.log.Warn("delete: the thread's quota group is left", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	}
}
