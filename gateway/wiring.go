package gateway

// The wiring that no room makes by itself: the checkpoints' room, whose
// restores need the jails and the jobs together (checkpointsCommands),
// and the figures the metrics read at each scrape.

import (
	"context"
	"path/filepath"
	"time"

	"warren/fs"
	"warren/gateway/checkpoints"
	"warren/gateway/files"
	"warren/gateway/health"
	"warren/gateway/metrics"
	"warren/gateway/replicas"
	"warren/gateway/threadlimit"
	"warren/gateway/threads"
	"warren/meta"
	"warren/snapshot"
)

// DefaultCheckpoints is how many checkpoints a thread keeps unless its
// settings or Config.Checkpoints say otherwise.
const DefaultCheckpoints = checkpoints.Default

// maxCheckpoints bounds the checkpoints a thread keeps.
const maxCheckpoints = checkpoints.Max

// newCheckpoints makes the checkpoints' room over g's threads, quotas,
// hub and events, which must be made; the jails and the jobs, made after
// it, are reached through checkpointsCommands when a restore runs (never
// before the API serves).
func newCheckpoints(g *Gateway) *checkpoints.Checkpoints {
	// No typed nil: the checkpoints tell a store by a Replicas not nil.
	var rep checkpoints.Replicas
	if g.replicas != nil {
		rep = g.replicas
	}
	return checkpoints.New(checkpoints.Config{
		Replicas: rep,
		Store:    g.store, Logger: g.log, Hub: g.hub, Quotas: g.quotas,
		Threads: g.threads, Commands: checkpointsCommands{g}, Events: g.events,
		Stale: g.events.OnStale, CheckRun: files.ValidRun,
		RepoDir: func(tenant string) string { return filepath.Join(g.cfg.SnapshotsDir, threads.EncodeID(tenant)) },

		Checkpoints: g.cfg.Checkpoints, Limits: g.cfg.CheckpointLimits,
		SnapshotQuotaBytes: g.cfg.SnapshotQuotaBytes, TenantSnapshotQuotaBytes: g.cfg.TenantSnapshotQuotaBytes,
		HostID:      g.cfg.HostID,
		CollectHook: g.cfg.collectHook, Hold: g.cfg.checkpointHold,
	})
}

// newReplicas opens the snapshot store that g's checkpoints are copied
// to (Config.SnapshotStore).
func newReplicas(ctx context.Context, g *Gateway) (*replicas.Replicas, error) {
	return replicas.Start(ctx, replicas.Config{
		URL: g.cfg.SnapshotStore, Store: g.store, Repos: replicasRepos{g}, HostID: g.cfg.HostID, Logger: g.log.Named("replicas"),
		CollectEvery: g.cfg.storeCollectEvery, Grace: g.cfg.storeGrace, CollectHook: g.cfg.storeCollectHook,
		CacheBytes: snapshotCacheBytes(g.cfg),
		CacheDir: func(tenant string) string {
			return filepath.Join(g.cfg.DataDir, "replica-cache", threads.EncodeID(tenant))
		},
		Served: func() []replicas.Served {
			uses := g.threads.Uses()
			out := make([]replicas.Served, 0, len(uses))
			for _, u := range uses {
				if root, _, err := g.threads.Paths(u.Key); err == nil {
					out = append(out, replicas.Served{Key: u.Key, Root: root})
				}
			}
			return out
		},
		Pending: g.hub.PendingChanges, PendingEvery: g.cfg.SnapshotPendingEvery,
	})
}

// replicasRepos is what the replicas call of the checkpoints and the
// threads, made after them (Run starts once they are).
type replicasRepos struct{ g *Gateway }

func (r replicasRepos) Repo(tenant string) (*snapshot.Repo, error) {
	return r.g.checkpoints.Repo(tenant)
}

func (r replicasRepos) LockTurn(ctx context.Context, k meta.ThreadKey) (func(), error) {
	return r.g.threads.LockTurn(ctx, k)
}

// checkpointsCommands is what a restore calls of the jails and the jobs.
type checkpointsCommands struct{ g *Gateway }

var _ checkpoints.Commands = checkpointsCommands{}

func (c checkpointsCommands) BeginRestore(k meta.ThreadKey, why string) []string {
	return c.g.jails.BeginRestore(k, why)
}

func (c checkpointsCommands) EndRestore(k meta.ThreadKey) { c.g.jails.EndRestore(k) }

func (c checkpointsCommands) RunningJobIDs(k meta.ThreadKey) []string { return c.g.jobs.RunningIDs(k) }

func (c checkpointsCommands) NoteStopping(k meta.ThreadKey, why string) {
	c.g.jobs.NoteStopping(k, why)
}

func (c checkpointsCommands) CloseJail(k meta.ThreadKey) { c.g.jails.CloseJail(k) }

func (c checkpointsCommands) WaitThreadJobs(k meta.ThreadKey) { c.g.jobs.WaitThread(k) }

// metricsFigures are the figures the metrics read from g at each scrape.
// Each reads g's field when called: Start fills some (the events, the
// background restore) after it registers them.
func metricsFigures(g *Gateway) metrics.Figures {
	fig := metrics.Figures{
		Threads:     func() (int, int) { return g.threads.Counts() },
		Admission:   func() threadlimit.Headroom { return g.threads.Headroom() },
		Jails:       func() int { return g.jails.Count() },
		JailsLive:   func() (int, int) { return g.jails.Live() },
		JobsRunning: func() int { return g.jobs.Count() },
		Events:      func() (int, uint64) { return g.events.Stats() },
		Lease:       func() (bool, time.Time) { return g.hosts.Valid() },
		Descriptors: func() fs.DescriptorStats { return g.hub.Descriptors() },
		LockWaits:   func() int { return g.hub.LockWaits() },
		RestoreLeft: func() int { return g.threads.RestoreLeft() },
		ImageBytes:  func() int64 { return g.images.Bytes() },
	}
	if g.cfg.SnapshotStore != "" {
		fig.SnapshotUploads = func() (int, int64, bool) {
			_, up, _ := g.replicas.Stats()
			n, bytes, _ := g.replicas.Backlog()
			return n, bytes, up
		}
		// Read at each scrape: the room is made after the figures.
		fig.SnapshotCollections = func() (int64, int64, int64) { return g.replicas.Collections() }
	}
	return fig
}

// healthReplicas is what the health room reads of the replicas: nil
// without a store (no typed nil).
func healthReplicas(g *Gateway) health.Replicas {
	if g.replicas == nil {
		return nil
	}
	return g.replicas
}
