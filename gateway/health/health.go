// Package health is the room of what the operators read of the daemon:
// whether it answers (/healthz), whether it may take work (/readyz: the
// store answers, the lease holds, the disk and the descriptors have room,
// a new thread would be admitted), and what a thread uses (its jail's
// cgroup, its workspace on disk, its jobs and checkpoints, its mount's
// requests). The metrics are package metrics'.
//
// It owns no state, lock or goroutine: each answer reads the rooms it
// asks (Config), through small interfaces, at the moment it is asked.
package health

import (
	"warren/gateway/hosts"
	"warren/gateway/quota"
	"warren/gateway/threadlimit"
	"warren/jail"
	"warren/meta"
)

// Config is what the health room reads.
type Config struct {
	Store  meta.Store
	HostID string
	// DataDir and WorkspacesDir must keep room on their disks.
	DataDir, WorkspacesDir string
	Threads                Threads
	Jails                  Jails
	Jobs                   Jobs
	Hosts                  *hosts.Hosts
	Quotas                 *quota.Quotas
	Checkpoints            Checkpoints
	// Images gives the images' sizes; nil shows none.
	Images Images
	// Replicas, nil without a snapshot store, says whether uploads to it
	// succeed.
	Replicas Replicas
}

// Replicas is what it reads of the snapshot store's uploads (package
// replicas).
type Replicas interface {
	Stats() (backlog int, up bool, why error)
	// Backlog is the checkpoints waiting, their bytes and the bound on
	// those (0: none).
	Backlog() (checkpoints int, bytes, bound int64)
}

// Images is what it reads of the images (package images).
type Images interface {
	// Size is the unpacked size of the image of digest, if the store
	// holds it; Bytes the whole store's.
	Size(digest string) (int64, bool)
	Bytes() int64
}

// Threads is what the health room reads of the threads (package threads).
type Threads interface {
	Serving() bool
	Headroom() threadlimit.Headroom
	RestoreLeft() int
	Requests(k meta.ThreadKey) (uint64, bool)
	RootOf(b meta.Binding) (string, error)
	HomeOf(b meta.Binding) (string, error)
}

// Jails is what it reads of the jails (package jails).
type Jails interface {
	Live() (live, max int)
	JailOf(k meta.ThreadKey) *jail.Jail
}

// Jobs is what it reads of the jobs (package jobs).
type Jobs interface {
	Running(k meta.ThreadKey) int
}

// Checkpoints is what it reads of the checkpoints (package checkpoints).
type Checkpoints interface {
	SnapshotQuota(s meta.Settings) int64
}

// Health answers the operators' questions. New makes one; it needs no
// Close.
type Health struct {
	cfg Config // never changed
}

// New returns the health room of cfg.
func New(cfg Config) *Health { return &Health{cfg: cfg} }

// Handlers answer GET /healthz, /readyz and a thread's usage.
type Handlers struct{ h *Health }

// NewHandlers returns the handlers of h.
func NewHandlers(h *Health) *Handlers { return &Handlers{h: h} }
