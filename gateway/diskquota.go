package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/diskquota"
	"warren/meta"
)

// Disk quotas (docs/operations.md, "Disk quotas and the reserve"). The
// kernel enforces them, with btrfs quota groups (package diskquota): a
// thread's workspace folder is a subvolume with a limit, so every write
// into it past the limit gets EDQUOT, the daemon's and the passthrough
// writes the kernel makes for a jail alike; and all workspaces together
// are limited so that Config.DiskReserveBytes of the disk stay free for
// the metadata store and everything else.
//
// On btrfs every new workspace folder is a subvolume, quota or not, so
// that a quota can be given later. A quota or reserve the workspaces'
// filesystem cannot enforce is an error (at start for the daemon's
// defaults, at bind for a thread's setting), never a silent no-op.

// minDiskBytes is the smallest quota a thread may get: below it a jail
// cannot even write a shell's history.
const minDiskBytes = 1 << 20

// diskQuotas is the gateway's hold on the workspaces' quota groups.
type diskQuotas struct {
	mu sync.Mutex
	fs *diskquota.FS // nil until quotas are needed
}

// quotaFS returns the workspaces' filesystem with quotas on, turning them
// on at its first call.
func (g *Gateway) quotaFS() (*diskquota.FS, error) {
	g.quotas.mu.Lock()
	defer g.quotas.mu.Unlock()
	if g.quotas.fs != nil {
		return g.quotas.fs, nil
	}
	q, err := diskquota.Open(g.wsBase)
	if err != nil {
		return nil, err
	}
	g.quotas.fs = q
	return q, nil
}

// startQuotas checks at start that the workspaces' filesystem enforces the
// default quota and the reserve, if they are set, and sets the reserve.
// A limit no flag asks for any more is lifted: the reserve an earlier run
// left on all workspaces together (quota groups outlive the daemon; after
// a full disk that limit is a byte, and would stop every thread), here;
// a thread's own quota at its bind (applyDiskQuota).
func (g *Gateway) startQuotas() error {
	if g.cfg.DiskQuotaBytes == 0 && g.cfg.DiskReserveBytes == 0 {
		return g.setReserve()
	}
	if _, err := g.quotaFS(); err != nil {
		return fmt.Errorf("disk quota %d and reserve %d bytes: workspaces folder %s: %w",
			g.cfg.DiskQuotaBytes, g.cfg.DiskReserveBytes, g.wsBase, err)
	}
	if r, need := g.cfg.DiskReserveBytes, g.cfg.StoreFreeBytes; r > 0 && r < need && sameDisk(g.wsBase, MetaDir(g.cfg.DataDir)) {
		g.log.Warn("the disk reserve is below what the metadata store on the same disk keeps free; full workspaces will stop its writes",
			"reserve", r, "store_needs", need)
	}
	return g.setReserve()
}

// setReserve limits all workspaces (and the snapshot repositories on
// their disk) together so that the reserve stays free, from the disk's
// state now; with no reserve it lifts a limit an earlier run set, where
// quotas are on.
func (g *Gateway) setReserve() error {
	if g.cfg.DiskReserveBytes == 0 && !diskquota.Enabled(g.wsBase) {
		return nil
	}
	q, err := g.quotaFS()
	if err != nil {
		return fmt.Errorf("disk reserve: lift the limit of an earlier run: %w", err)
	}
	limit, err := q.Reserve(g.cfg.DiskReserveBytes)
	if err != nil {
		return fmt.Errorf("disk reserve: %w", err)
	}
	g.log.Debug("workspaces limited to keep the disk reserve", "reserve", g.cfg.DiskReserveBytes, "limit", limit)
	return nil
}

// makeRepoFolder makes dir, a tenant's snapshot repository, if it is not
// there: a btrfs subvolume where the snapshots folder is on btrfs, so
// that it can count in the reserve like a workspace. Where the reserve or
// quotas are in force on the workspaces' disk and dir is on it, dir joins
// their quota group: the kernel then refuses a checkpoint's objects past
// the reserve (EDQUOT) as it refuses a workspace's writes. A repository
// made as a plain folder, by an older warren, cannot join; it is counted
// through the disk's free space each time the reserve is set again
// (after each of its checkpoints, checkpointed).
func (g *Gateway) makeRepoFolder(dir string) error {
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
	if g.cfg.DiskReserveBytes == 0 && g.cfg.DiskQuotaBytes == 0 || !diskquota.SameFilesystem(dir, g.wsBase) {
		return nil
	}
	sub, err := diskquota.IsSubvolume(dir)
	if err != nil {
		return err
	}
	if !sub {
		g.log.Warn("a snapshot repository made as a plain folder cannot join the workspaces' quota group; the reserve counts it through the disk's free space",
			"folder", dir)
		return nil
	}
	q, err := g.quotaFS()
	if err != nil {
		return fmt.Errorf("count snapshots %s in the disk reserve: %w", dir, err)
	}
	if err := q.Join(dir); err != nil {
		return fmt.Errorf("count snapshots %s in the disk reserve: %w", dir, err)
	}
	return nil
}

// checkpointed sets the reserve again after a checkpoint wrote objects, so
// that a repository outside the quota group (a plain folder, or on btrfs
// with quotas at their defaults) leaves the reserve free: its bytes left
// the disk's free space, which the limit follows.
func (g *Gateway) checkpointed(k meta.ThreadKey) {
	if g.cfg.DiskReserveBytes == 0 {
		return
	}
	if err := g.setReserve(); err != nil {
		g.log.Warn("set the disk reserve again after a checkpoint", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	}
}

// sameDisk says whether a and b are on one filesystem (false if either
// cannot be read).
func sameDisk(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// diskBytes is the quota of a thread with settings s; 0 is none.
func (g *Gateway) diskBytes(s meta.Settings) int64 {
	return cmp.Or(s.DiskBytes, g.cfg.DiskQuotaBytes)
}

// applyDiskQuota gives the workspace folder root of thread k its quota
// from settings s, and counts it in the reserve. A thread with no quota
// on a gateway with no reserve needs nothing, unless its workspace is a
// subvolume and quotas are on: a limit of an earlier run or setting is
// then lifted. What cannot be enforced is an error.
func (g *Gateway) applyDiskQuota(k meta.ThreadKey, root string, s meta.Settings) error {
	bytes, reserve := g.diskBytes(s), g.cfg.DiskReserveBytes
	sub, err := diskquota.IsSubvolume(root)
	if err != nil {
		return fmt.Errorf("disk quota of thread %s: %w", call.KeyName(k), err)
	}
	if bytes == 0 && reserve == 0 && (!sub || !diskquota.Enabled(root)) {
		return nil // nothing asked, and no limit to lift
	}
	q, err := g.quotaFS()
	if err != nil {
		return fmt.Errorf("%w: disk quota of %d bytes for thread %s: workspaces folder %s cannot enforce it: %w",
			api.ErrInvalid, bytes, call.KeyName(k), g.wsBase, err)
	}
	if !sub {
		// Something is asked (a plain folder with nothing asked returned
		// above), and a plain folder cannot have it.
		return fmt.Errorf("%w: disk quota of %d bytes and reserve of %d for thread %s: its workspace %s was made as a plain folder, before quotas; the filesystem cannot bound it",
			api.ErrInvalid, bytes, reserve, call.KeyName(k), root)
	}
	if err := q.Limit(root, bytes); err != nil {
		return fmt.Errorf("disk quota of thread %s: %w", call.KeyName(k), err)
	}
	// The disk may have changed since the last bind (files of other
	// programs): the reserve is set again from its state now.
	return g.setReserve()
}

// makeWorkspace creates the workspace folder root, a btrfs subvolume where
// the workspaces are on btrfs (so that it can get a quota), and registers
// its removal on undo, like makeLeaf. An existing folder stays as it is.
func makeWorkspace(undo *undoStack, root string) error {
	parent := filepath.Dir(root)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", parent, err)
	}
	btrfs, err := diskquota.IsBtrfs(parent)
	if err != nil || !btrfs {
		return makeLeaf(undo, root, 0o755)
	}
	err = diskquota.MakeSubvolume(root)
	if errors.Is(err, os.ErrExist) {
		return makeLeaf(undo, root, 0o755)
	}
	if err != nil {
		return err
	}
	// An empty subvolume is removed like a folder.
	undo.pushFolder("remove "+root, func() error { return os.Remove(root) })
	return nil
}
