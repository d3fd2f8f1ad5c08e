package health

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/checkpoints"
	"warren/meta"
)

// Usage answers GET .../threads/{thread}/usage.
func (h *Handlers) Usage(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	u, err := h.h.Usage(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.UsageResponse{Usage: u}, nil
}

// Usage gathers what thread uses here: its jail's cgroup, its workspace
// and home on disk, its jobs and its mount's requests. A thread another live host
// serves is refused (pinned): its figures are that host's.
func (h *Health) Usage(ctx context.Context, tenant, thread string) (api.Usage, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.Usage{}, err
	}
	b, err := h.cfg.Store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return api.Usage{}, call.NoThread(k, "usage")
	}
	if err != nil {
		return api.Usage{}, fmt.Errorf("read binding of %s: %w", call.KeyName(k), err)
	}
	if owner := h.cfg.Hosts.Owner(ctx, b); owner != "" && owner != h.cfg.HostID {
		return api.Usage{}, h.cfg.Hosts.PinnedError(ctx, k, &b, owner)
	}
	u := api.Usage{Tenant: k.Tenant, Thread: k.Thread, DiskQuotaBytes: h.cfg.Quotas.DiskBytes(b.Settings),
		SnapshotQuotaBytes: h.cfg.Checkpoints.SnapshotQuota(b.Settings)}
	switch h, err := h.cfg.Store.GetHistory(ctx, k); {
	case err == nil:
		u.SnapshotBytes, u.Checkpoints = checkpoints.SnapshotBytes(h.Checkpoints), len(h.Checkpoints)
	case !errors.Is(err, meta.ErrNotFound):
		return api.Usage{}, fmt.Errorf("checkpoints of %s: read the history: %w", call.KeyName(k), err)
	}

	if j := h.cfg.Jails.JailOf(k); j != nil {
		ju, err := j.Usage()
		if err != nil {
			return api.Usage{}, fmt.Errorf("usage of the jail of %s: %w", call.KeyName(k), err)
		}
		u.Jail = true
		u.CPUSeconds = ju.CPU.Seconds()
		u.MemoryBytes, u.MemoryPeakBytes, u.Processes = ju.MemoryBytes, ju.MemoryPeakBytes, ju.Processes
	}

	u.JobsRunning = h.cfg.Jobs.Running(k)
	jobs, err := h.cfg.Store.ListJobs(ctx, k)
	if err != nil {
		return api.Usage{}, fmt.Errorf("jobs of %s: %w", call.KeyName(k), err)
	}
	u.Jobs = len(jobs)

	u.FUSERequests, _ = h.cfg.Threads.Requests(k)
	if h.cfg.Images != nil {
		u.Image, u.ImageDigest = b.Settings.Image, b.Settings.ImageDigest
		if b.Settings.ImageDigest != "" {
			u.ImageBytes, _ = h.cfg.Images.Size(b.Settings.ImageDigest)
		}
		u.ImageStoreBytes = h.cfg.Images.Bytes()
	}

	root, err := h.cfg.Threads.RootOf(b)
	if err != nil {
		return api.Usage{}, err
	}
	if u.DiskBytes, u.DiskFiles, err = diskUsage(ctx, root); err != nil {
		return api.Usage{}, fmt.Errorf("disk usage of %s: %w", call.KeyName(k), err)
	}
	// Its home apart: the workspace's figures stay what the file API
	// shows. A thread not mounted since homes came has none yet.
	home, err := h.cfg.Threads.HomeOf(b)
	if err != nil {
		return api.Usage{}, err
	}
	u.HomeBytes, u.HomeFiles, err = diskUsage(ctx, home)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return api.Usage{}, fmt.Errorf("disk usage of the home of %s: %w", call.KeyName(k), err)
	}
	return u, nil
}

// diskUsage walks the backing folder root (never following a link) and
// returns the size of its files and the count of its entries. An entry
// removed during the walk is skipped.
func diskUsage(ctx context.Context, root string) (bytes, entries int64, err error) {
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil
			}
			return err
		}
		if path == root {
			return nil
		}
		if entries%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		entries++
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				bytes += fi.Size()
			}
		}
		return nil
	})
	return bytes, entries, err
}
