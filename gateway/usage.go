package gateway

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

func (g *Gateway) handleUsage(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	u, err := g.usage(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.UsageResponse{Usage: u}, nil
}

// usage gathers what thread uses here: its jail's cgroup, its workspace
// on disk, its jobs and its mount's requests. A thread another live host
// serves is refused (pinned): its figures are that host's.
func (g *Gateway) usage(ctx context.Context, tenant, thread string) (api.Usage, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.Usage{}, err
	}
	b, err := g.store.GetBinding(ctx, k)
	if errors.Is(err, meta.ErrNotFound) {
		return api.Usage{}, fmt.Errorf("%w: thread %s is not bound", api.ErrNotFound, call.KeyName(k))
	}
	if err != nil {
		return api.Usage{}, fmt.Errorf("read binding of %s: %w", call.KeyName(k), err)
	}
	if owner := g.hosts.Owner(ctx, b); owner != "" && owner != g.cfg.HostID {
		return api.Usage{}, g.hosts.PinnedError(ctx, k, &b, owner)
	}
	u := api.Usage{Tenant: k.Tenant, Thread: k.Thread, DiskQuotaBytes: g.quotas.DiskBytes(b.Settings),
		SnapshotQuotaBytes: g.checkpoints.SnapshotQuota(b.Settings)}
	switch h, err := g.store.GetHistory(ctx, k); {
	case err == nil:
		u.SnapshotBytes, u.Checkpoints = checkpoints.SnapshotBytes(h.Checkpoints), len(h.Checkpoints)
	case !errors.Is(err, meta.ErrNotFound):
		return api.Usage{}, fmt.Errorf("checkpoints of %s: read the history: %w", call.KeyName(k), err)
	}

	if j := g.jails.JailOf(k); j != nil {
		ju, err := j.Usage()
		if err != nil {
			return api.Usage{}, fmt.Errorf("usage of the jail of %s: %w", call.KeyName(k), err)
		}
		u.Jail = true
		u.CPUSeconds = ju.CPU.Seconds()
		u.MemoryBytes, u.MemoryPeakBytes, u.Processes = ju.MemoryBytes, ju.MemoryPeakBytes, ju.Processes
	}

	u.JobsRunning = g.jobs.Running(k)
	jobs, err := g.store.ListJobs(ctx, k)
	if err != nil {
		return api.Usage{}, fmt.Errorf("jobs of %s: %w", call.KeyName(k), err)
	}
	u.Jobs = len(jobs)

	u.FUSERequests, _ = g.threads.Requests(k)

	root, err := g.threads.RootOf(b)
	if err != nil {
		return api.Usage{}, err
	}
	if u.DiskBytes, u.DiskFiles, err = diskUsage(ctx, root); err != nil {
		return api.Usage{}, fmt.Errorf("disk usage of %s: %w", call.KeyName(k), err)
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
