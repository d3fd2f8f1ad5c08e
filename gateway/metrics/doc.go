// Package metrics is the room of the daemon's Prometheus series
// (docs/operations.md, "Metrics", lists them; their names, help texts and
// labels are part of the interface).
//
// It owns the registry of the gateway's own (never the process's
// default one, so two gateways in one process never mix their figures),
// the counters and histograms the rooms move where things happen
// (APIError, Refused, ExecEnded, JobStarted, JobEnded, JailStarted,
// Fenced), the store's observer (ObserveStore, for meta.Observed), the
// FUSE requests' observer (FUSEObserver, for fs.HubConfig.ObserveOp) and
// GET /metrics (Handlers, http.go).
//
// It calls no room. The figures that are state (threads, jails, jobs,
// event readers, the lease, the mounts' descriptors, the restore) are
// read at each scrape through the functions the gateway gives Watch at
// Start (Figures); it imports package threadlimit for the type of the
// admission's headroom only.
//
// It holds no lock of its own (the series are Prometheus', safe for
// concurrent use; fuseByOp is made by New and only read after) and starts
// no goroutine: it needs no Close.
package metrics
