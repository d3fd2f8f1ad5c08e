package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"warren/api"
	"warren/fs"
	"warren/gateway/threadlimit"
	"warren/meta"
)

// Metrics are the gateway's Prometheus series (docs/operations.md lists
// them). They live in a registry of the gateway's own, not the process's
// default one: two gateways in one process (the tests) never mix their
// figures. Counters and histograms are moved where things happen; the
// figures that are state (threads, jails, subscribers, the lease,
// descriptors) are read at each scrape (Watch).
//
// No series has a per-thread label: a server holds thousands of threads,
// and their figures belong to the usage call.
type Metrics struct {
	reg *prometheus.Registry

	fuseOps      *prometheus.HistogramVec // by op
	refusals     *prometheus.CounterVec   // by kind
	apiErrors    *prometheus.CounterVec   // by code
	execs        prometheus.Counter
	execSeconds  prometheus.Histogram
	jobs         prometheus.Counter
	jailStarts   *prometheus.CounterVec // by result
	jailSeconds  prometheus.Histogram
	jobOutput    *prometheus.CounterVec // by fate: kept, dropped
	fences       prometheus.Counter
	fencedThread prometheus.Counter
	storeCalls   *prometheus.HistogramVec // by op
	storeErrors  *prometheus.CounterVec   // by op

	// fuseByOp holds fuseOps' histogram of each op fs.ObservedOps
	// names; made by New, only read after.
	fuseByOp map[string]prometheus.Observer
}

// New makes the series, in a registry of their own.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		fuseOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_fuse_request_duration_seconds",
			Help:    "Time the daemon took to answer a FUSE request, by operation (reads and writes passed through never reach it).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10 µs .. 2.6 s
		}, []string{"op"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_refusals_total",
			Help: "Refusals, by kind: escape (a path or link leading out), stale (a write based on a stale read), quota (a workspace or disk full), pinned (a thread another server owns, or this one is fenced).",
		}, []string{"kind"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_api_errors_total",
			Help: "API calls answered with an error, by error code (docs/api.md).",
		}, []string{"code"}),
		execs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_execs_total",
			Help: "Commands run in the foreground (POST .../exec), ended.",
		}),
		execSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_exec_duration_seconds",
			Help:    "Time from a foreground command's start to its end, as its caller waits for it.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 4, 10), // 1 ms .. 262 s
		}),
		jobs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_jobs_started_total",
			Help: "Background jobs started (spawned, or sent to the background).",
		}),
		jailStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_jail_starts_total",
			Help: "Jails started, by result: ok or error.",
		}, []string{"result"}),
		jailSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warren_jail_start_duration_seconds",
			Help:    "Time a jail takes to start, from the request to its init's answer.",
			Buckets: prometheus.ExponentialBuckets(5e-3, 2, 12), // 5 ms .. 10 s
		}),
		jobOutput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_job_output_bytes_total",
			Help: "Output of ended jobs, by fate: kept (still readable when the job ended) or dropped (overwritten in its ring before anyone read it).",
		}, []string{"fate"}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_lease_fences_total",
			Help: "Times this server's lease ended and its threads were fenced.",
		}),
		fencedThread: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warren_fenced_threads_total",
			Help: "Threads taken down by a fence.",
		}),
		storeCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warren_store_call_duration_seconds",
			Help:    "Time a metadata store call took, by call.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10), // 50 µs .. 13 s
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_store_errors_total",
			Help: "Metadata store calls that failed (the store down or erring; not-found and conflicts are answers, not failures), by call.",
		}, []string{"op"}),
	}
	m.reg.MustRegister(m.fuseOps, m.refusals, m.apiErrors, m.execs, m.execSeconds, m.jobs, m.jailStarts, m.jailSeconds,
		m.jobOutput, m.fences, m.fencedThread, m.storeCalls, m.storeErrors,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The series of every kind and fate exist from the start at zero, so
	// that a rate or an alert sees them before the first one happens.
	for _, k := range []string{RefusedEscape, RefusedStale, RefusedQuota, RefusedPinned} {
		m.refusals.WithLabelValues(k)
	}
	for _, f := range []string{"kept", "dropped"} {
		m.jobOutput.WithLabelValues(f)
	}
	for _, r := range []string{"ok", "error"} {
		m.jailStarts.WithLabelValues(r)
	}
	m.fuseByOp = make(map[string]prometheus.Observer)
	for _, op := range fs.ObservedOps() {
		m.fuseByOp[op] = m.fuseOps.WithLabelValues(op)
	}
	return m
}

// The kinds of warren_refusals_total.
const (
	RefusedEscape = "escape"
	RefusedStale  = "stale"
	RefusedQuota  = "quota"
	RefusedPinned = "pinned"
)

// refusalKind is the refusal an API error code is, "" for none.
func refusalKind(code string) string {
	switch code {
	case api.CodeOutside:
		return RefusedEscape
	case api.CodeStale:
		return RefusedStale
	case api.CodeQuota, api.CodeNoSpace:
		return RefusedQuota
	case api.CodePinned, api.CodeFenced:
		return RefusedPinned
	}
	return ""
}

// APIError counts an error answer with code.
func (m *Metrics) APIError(code string) {
	m.apiErrors.WithLabelValues(code).Inc()
	if k := refusalKind(code); k != "" {
		m.refusals.WithLabelValues(k).Inc()
	}
}

// observeFUSE is the hub's fs.OpObserver. It is called for nearly every
// FUSE request: the histograms of the operations the filesystem names are
// looked up in fuseByOp, made once, not through the vector's label hash
// and lock each time.
func (m *Metrics) observeFUSE(op string, took time.Duration) {
	h, ok := m.fuseByOp[op]
	if !ok {
		h = m.fuseOps.WithLabelValues(op)
	}
	h.Observe(took.Seconds())
}

// FUSEObserver is the hub's fs.OpObserver (fs.HubConfig.ObserveOp), nil
// when off.
func (m *Metrics) FUSEObserver(off bool) fs.OpObserver {
	if off {
		return nil
	}
	return m.observeFUSE
}

// ObserveStore is the store's meta.Observer (meta.Observed).
func (m *Metrics) ObserveStore(op string, took time.Duration, err error) {
	m.storeCalls.WithLabelValues(op).Observe(took.Seconds())
	if meta.Failed(err) {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// JailStarted counts a jail's start that took took and failed with err.
func (m *Metrics) JailStarted(took time.Duration, err error) {
	if err != nil {
		m.jailStarts.WithLabelValues("error").Inc()
		return
	}
	m.jailStarts.WithLabelValues("ok").Inc()
	m.jailSeconds.Observe(took.Seconds())
}

// Refused counts a refusal of kind (RefusedEscape, RefusedStale,
// RefusedQuota, RefusedPinned) that no error answer counts: one the
// filesystem made.
func (m *Metrics) Refused(kind string) {
	m.refusals.WithLabelValues(kind).Inc()
}

// ExecEnded counts a foreground command that ran for took.
func (m *Metrics) ExecEnded(took time.Duration) {
	m.execs.Inc()
	m.execSeconds.Observe(took.Seconds())
}

// JobStarted counts a job started (spawned, or sent to the background).
func (m *Metrics) JobStarted() { m.jobs.Inc() }

// Fenced counts a fence of the host's lease that took threads down.
func (m *Metrics) Fenced(threads int) {
	m.fences.Inc()
	m.fencedThread.Add(float64(threads))
}

// JobEnded counts what an ended job's output came to.
func (m *Metrics) JobEnded(total, dropped int64) {
	m.jobOutput.WithLabelValues("kept").Add(float64(total - dropped))
	m.jobOutput.WithLabelValues("dropped").Add(float64(dropped))
}

// Figures are what the series of state read at each scrape: functions
// of the daemon's rooms, each safe to call from any goroutine at any time
// from the first scrape on.
type Figures struct {
	// Threads counts the threads mounted, and those bound here whose
	// mount failed.
	Threads func() (mounted, failed int)
	// Admission is the headroom of the threads' admission.
	Admission func() threadlimit.Headroom
	// Jails counts the jails running; JailsLive the jails live (running
	// or starting) and their bound.
	Jails     func() int
	JailsLive func() (live, max int)
	// JobsRunning counts the background jobs running.
	JobsRunning func() int
	// Events are the event stream's readers now and the events they
	// missed so far.
	Events func() (subscribers int, missed uint64)
	// Lease says whether this server holds its lease, and until when.
	Lease func() (valid bool, until time.Time)
	// Descriptors are the mounts' descriptors and nodes, LockWaits the
	// lock requests waiting on them.
	Descriptors func() fs.DescriptorStats
	LockWaits   func() int
	// RestoreLeft counts the threads the start's background restore has
	// still to serve again.
	RestoreLeft func() int
	// ImageBytes is the size of the image store's unpacked images.
	ImageBytes func() int64
	// SnapshotUploads, nil without a snapshot store, are the checkpoints
	// waiting to be copied to it, their bytes (what the snapshot quotas
	// count of them, bounded by --snapshot-cache-bytes) and whether it
	// answered last.
	SnapshotUploads func() (backlog int, bytes int64, up bool)
	// SnapshotCollections, nil without a snapshot store, count the
	// collections of the store this server ran, those that failed, and
	// the bytes they deleted.
	SnapshotCollections func() (ok, failed, freed int64)
}

// Watch registers the figures read from fig at each scrape. Call it once.
func (m *Metrics) Watch(fig Figures) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	// What is left of each limit of admission before a new thread is
	// refused (negative: past it).
	headroom := func(resource string, f func(threadlimit.Headroom) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "warren_admission_headroom",
			Help:        "What is left before new threads are refused, by resource: threads (--max-threads), tenant_threads (--max-threads-per-tenant, of the busiest tenant), descriptors (above the reserve), memory_bytes (below the cap), os_threads (above the reserve).",
			ConstLabels: prometheus.Labels{"resource": resource},
		}, func() float64 { return f(fig.Admission()) })
	}
	withState := func(state string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "warren_threads",
			Help:        "Threads this server holds, by state: mounted (served), failed (bound here, its mount failed).",
			ConstLabels: prometheus.Labels{"state": state},
		}, f)
	}
	m.reg.MustRegister(
		withState("mounted", func() float64 { mounted, _ := fig.Threads(); return float64(mounted) }),
		withState("failed", func() float64 { _, failed := fig.Threads(); return float64(failed) }),
		gauge("warren_jails", "Jails running (one per thread that ran a command).", func() float64 { return float64(fig.Jails()) }),
		gauge("warren_jails_max", "The bound of live jails (--max-jails): past it a new jail takes the place of the least recently used idle one.", func() float64 { _, n := fig.JailsLive(); return float64(n) }),
		gauge("warren_admitted_threads", "Threads holding an admission slot: mounted, or being mounted (--max-threads counts them).", func() float64 { return float64(fig.Admission().Threads) }),
		gauge("warren_max_threads", "The limit of threads served (--max-threads).", func() float64 { return float64(fig.Admission().MaxThreads) }),
		gauge("warren_max_threads_per_tenant", "The limit of threads served per tenant (--max-threads-per-tenant).", func() float64 { return float64(fig.Admission().MaxThreadsPerTenant) }),
		gauge("warren_tenant_threads_most", "Threads served of the tenant that has the most.", func() float64 { return float64(fig.Admission().TenantMost) }),
		gauge("warren_admission_open", "1 while a new thread would be admitted, 0 while new threads are refused (a limit or a reserve is reached; /readyz says which).", func() float64 {
			if fig.Admission().Refused == "" {
				return 1
			}
			return 0
		}),
		headroom("threads", func(h threadlimit.Headroom) float64 { return float64(h.MaxThreads - h.Threads) }),
		headroom("tenant_threads", func(h threadlimit.Headroom) float64 { return float64(h.MaxThreadsPerTenant - h.TenantMost) }),
		headroom("descriptors", func(h threadlimit.Headroom) float64 { return float64(h.FDLimit - h.FDReserve - h.FDs) }),
		headroom("memory_bytes", func(h threadlimit.Headroom) float64 { return float64(h.MemoryCap - h.RSS) }),
		headroom("os_threads", func(h threadlimit.Headroom) float64 {
			return float64(h.OSThreadLimit - h.OSThreadReserve - h.OSThreads)
		}),
		gauge("warren_jobs_running", "Background jobs running.", func() float64 { return float64(fig.JobsRunning()) }),
		gauge("warren_event_subscribers", "Readers of GET /v1/events now.", func() float64 { n, _ := fig.Events(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "warren_events_missed_total",
			Help: "Events a reader lost because it read too slowly (its queue was full).",
		}, func() float64 { _, missed := fig.Events(); return float64(missed) }),
		gauge("warren_lease_valid", "1 while this server holds its lease on the metadata store (always 1 without a host id), 0 while it is fenced.", func() float64 {
			if ok, _ := fig.Lease(); ok {
				return 1
			}
			return 0
		}),
		gauge("warren_lease_remaining_seconds", "Time left on this server's lease unless a heartbeat renews it (0 without a host id, or fenced).", func() float64 {
			if _, until := fig.Lease(); !until.IsZero() {
				return time.Until(until).Seconds()
			}
			return 0
		}),
		gauge("warren_fs_descriptors_open", "Node descriptors the mounts hold open.", func() float64 { return float64(fig.Descriptors().Open) }),
		gauge("warren_fs_descriptors_budget", "Node descriptors the mounts may hold open (half the open-file limit, less a reserve).", func() float64 { return float64(fig.Descriptors().Budget) }),
		gauge("warren_fs_nodes", "Files and folders the kernel knows through the mounts.", func() float64 { return float64(fig.Descriptors().Nodes) }),
		gauge("warren_fs_open_files", "Files the mounts' users hold open.", func() float64 { return float64(fig.Descriptors().Files) }),
		gauge("warren_restore_threads_left", "Threads of the former run the start's background restore has still to serve again.", func() float64 { return float64(fig.RestoreLeft()) }),
		gauge("warren_image_store_bytes", "Bytes of the image store's unpacked images, each on disk once.", func() float64 { return float64(fig.ImageBytes()) }),
		gauge("warren_fs_lock_waits", "Lock requests (F_SETLKW, flock) waiting on the mounts; each is a parked goroutine, never an OS thread.", func() float64 { return float64(fig.LockWaits()) }),
	)
	// Only with a store: a server without one has nothing to report, and
	// a 0 would read as a store down.
	if fig.SnapshotUploads != nil {
		m.reg.MustRegister(
			gauge("warren_snapshot_upload_backlog", "Checkpoints waiting to be copied to the snapshot store (--snapshots s3://...), the one being sent included.", func() float64 {
				n, _, _ := fig.SnapshotUploads()
				return float64(n)
			}),
			gauge("warren_snapshot_upload_backlog_bytes", "Bytes of the checkpoints waiting to be copied to the snapshot store (their own bytes, as the snapshot quotas count them); past --snapshot-cache-bytes checkpoints are refused.", func() float64 {
				_, b, _ := fig.SnapshotUploads()
				return float64(b)
			}),
			gauge("warren_snapshot_store_up", "1 while the last upload to the snapshot store succeeded, 0 while uploads fail (retried with backoff).", func() float64 {
				if _, _, up := fig.SnapshotUploads(); up {
					return 1
				}
				return 0
			}),
		)
	}
	if fig.SnapshotCollections != nil {
		collections := func(result string, f func(ok, failed int64) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "warren_snapshot_store_collections_total",
				Help:        "Collections of the snapshot store this server ran (the servers take turns), by result.",
				ConstLabels: prometheus.Labels{"result": result},
			}, func() float64 { ok, failed, _ := fig.SnapshotCollections(); return float64(f(ok, failed)) })
		}
		m.reg.MustRegister(
			collections("ok", func(ok, _ int64) int64 { return ok }),
			collections("failed", func(_, failed int64) int64 { return failed }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "warren_snapshot_store_freed_bytes_total",
				Help: "Bytes of manifests and packs this server's collections deleted from the snapshot store.",
			}, func() float64 { _, _, freed := fig.SnapshotCollections(); return float64(freed) }),
		)
	}
}

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
