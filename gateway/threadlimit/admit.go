// Package threadlimit decides whether the daemon takes one more thread, before
// any of its resources runs out: a thread that would pass a limit is
// refused with a message naming the limit (api.ErrUnavailable, 503), and
// the daemon never gets to the point where the kernel or the Go runtime
// refuses it (a bind that fails half-way with EMFILE, or a process that
// dies with "program exceeds 10000-thread limit").
//
// # What it owns
//
// An Admitter holds one slot per thread the daemon serves (mounted, or
// being mounted), counted in total and per tenant, and a cached reading
// of the process's gauges: open descriptors against the open-file
// limit, resident memory against a cap, OS threads against the Go
// runtime's limit. Admit takes a slot for a thread that holds none,
// checking every limit first; Hold takes one without checking (a mount
// restored at start, admitted by an earlier run); Release gives it back.
// Headroom reports all of it, for /metrics, /readyz and `warren doctor`.
//
// The counts are limits of their own (--max-threads,
// --max-threads-per-tenant); the gauges are reserves, for what the counts
// do not see: a thread that costs more than planned, descriptors held by
// API connections and uploads, OS threads blocked in system calls.
//
// # Rules
//
//   - It never fails open: a gauge that cannot be read refuses the bind,
//     with the error, rather than admitting it blind.
//   - It is cheap per bind: the gauges are read at most once per
//     Config.CacheFor (a directory listing of /proc/self/fd and one read
//     of /proc/self/stat); a burst of binds within that time is what the
//     reserves are sized to absorb.
//   - Only new threads are refused: a thread that holds a slot keeps it,
//     and its calls keep working at any limit.
//
// # Locks
//
// gaugeMu guards the cached reading and is held while the gauges are
// read (so concurrent binds read them once); mu guards the slots. Admit
// takes gaugeMu, lets it go, then takes mu: neither is held with the
// other, and neither is held over a call out of the package. Callers may
// call Hold and Release with their own locks held (the gateway does, under
// its thread set's lock): mu is a leaf.
package threadlimit

import (
	"fmt"
	"sync"
	"time"

	"warren/api"
	"warren/meta"
)

// Gauges reads the process's resources. Process is the real one; a test
// gives fakes.
type Gauges interface {
	// Descriptors returns the descriptors open and the open-file limit.
	Descriptors() (open, limit int, err error)
	// Memory returns the resident memory, in bytes, and the OS threads of
	// the process.
	Memory() (rss int64, threads int, err error)
}

// Config sets an Admitter's limits. Machine.Config gives the defaults
// derived from the machine.
type Config struct {
	// MaxThreads bounds the threads served in all; MaxThreadsPerTenant
	// those of one tenant. Each must be at least 1.
	MaxThreads, MaxThreadsPerTenant int
	// FDReserve is how many descriptors below the open-file limit a new
	// thread is refused at.
	FDReserve int
	// MemoryCap is the resident memory at which a new thread is refused.
	MemoryCap int64
	// OSThreadLimit is the Go runtime's limit of OS threads
	// (debug.SetMaxThreads) the process runs under, and OSThreadReserve
	// how far below it a new thread is refused.
	OSThreadLimit, OSThreadReserve int
	// CacheFor is how long a reading of the gauges is used; 0 means
	// DefaultCacheFor.
	CacheFor time.Duration
	// Gauges reads the process; nil means Process().
	Gauges Gauges
	// Now is the clock; nil means time.Now. For tests of the cache.
	Now func() time.Time
}

// DefaultCacheFor is how long a reading of the gauges is used unless
// Config.CacheFor says otherwise: 250 ms of binds (a few dozen at most,
// each a mount) is far less than any reserve.
const DefaultCacheFor = 250 * time.Millisecond

// Admitter decides the admission of new threads. New makes one; its zero
// value is not usable. It starts no goroutine and needs no Close.
type Admitter struct {
	cfg Config // never changed after New

	gaugeMu sync.Mutex
	reading reading   // the last reading; guarded by gaugeMu
	readAt  time.Time // when it was taken (zero: never); guarded by gaugeMu

	mu sync.Mutex
	// slots are the threads holding a slot, and perTenant their count by
	// tenant (no entry for a tenant with none); guarded by mu.
	slots     map[meta.ThreadKey]struct{}
	perTenant map[string]int
}

// reading is one look at the gauges.
type reading struct {
	fds, fdLimit int
	rss          int64
	osThreads    int
	err          error // the first gauge that failed, wrapped with which
}

// New makes an Admitter with cfg, or refuses limits no thread could pass.
func New(cfg Config) (*Admitter, error) {
	if cfg.MaxThreads < 1 || cfg.MaxThreadsPerTenant < 1 {
		return nil, fmt.Errorf("admit: max threads %d and per tenant %d must be at least 1", cfg.MaxThreads, cfg.MaxThreadsPerTenant)
	}
	if cfg.FDReserve < 0 || cfg.MemoryCap <= 0 || cfg.OSThreadLimit <= cfg.OSThreadReserve || cfg.OSThreadReserve < 0 {
		return nil, fmt.Errorf("admit: descriptor reserve %d, memory cap %d, OS thread limit %d and reserve %d leave no room",
			cfg.FDReserve, cfg.MemoryCap, cfg.OSThreadLimit, cfg.OSThreadReserve)
	}
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = DefaultCacheFor
	}
	if cfg.Gauges == nil {
		cfg.Gauges = Process()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Admitter{cfg: cfg, slots: make(map[meta.ThreadKey]struct{}), perTenant: make(map[string]int)}, nil
}

// Refusal is why a new thread was refused: Limit names the limit (a flag
// of the daemon, or the resource), and Error is the message for the
// client. It matches api.ErrUnavailable: the daemon is up, and the bind
// may work once threads are closed or the limit raised.
type Refusal struct {
	Limit string
	msg   string
}

func (r *Refusal) Error() string        { return r.msg }
func (r *Refusal) Is(target error) bool { return target == api.ErrUnavailable }

// The limits a Refusal names.
const (
	LimitThreads     = "max-threads"
	LimitPerTenant   = "max-threads-per-tenant"
	LimitDescriptors = "descriptors"
	LimitMemory      = "memory"
	LimitOSThreads   = "os-threads"
	LimitGauges      = "gauges" // a gauge could not be read
)

// Admit takes a slot for thread k, or says why not (a *Refusal). A
// thread that holds one already is admitted at once, whatever the
// limits: only new threads are refused. The caller gives the slot back
// with Release if the thread is not served after all.
func (a *Admitter) Admit(k meta.ThreadKey) error {
	if a.holds(k) {
		return nil
	}
	r := a.read()
	if err := r.refusal(a.cfg); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.slots[k]; ok {
		return nil
	}
	if n := len(a.slots); n >= a.cfg.MaxThreads {
		return &Refusal{LimitThreads, fmt.Sprintf("This server serves %d threads, its limit (--max-threads); close idle threads or raise it.", n)}
	}
	if n := a.perTenant[k.Tenant]; n >= a.cfg.MaxThreadsPerTenant {
		return &Refusal{LimitPerTenant, fmt.Sprintf("Tenant %q has %d threads on this server, its limit (--max-threads-per-tenant); close idle threads of the tenant or raise it.", k.Tenant, n)}
	}
	a.take(k)
	return nil
}

// Hold takes a slot for k without checking any limit: for a thread
// served already (a mount restored at start).
func (a *Admitter) Hold(k meta.ThreadKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.slots[k]; !ok {
		a.take(k)
	}
}

// take gives k a slot. a.mu must be held, and k hold none.
func (a *Admitter) take(k meta.ThreadKey) {
	a.slots[k] = struct{}{}
	a.perTenant[k.Tenant]++
}

// Release gives k's slot back; nothing if it holds none.
func (a *Admitter) Release(k meta.ThreadKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.slots[k]; !ok {
		return
	}
	delete(a.slots, k)
	if a.perTenant[k.Tenant]--; a.perTenant[k.Tenant] == 0 {
		delete(a.perTenant, k.Tenant)
	}
}

// holds reports whether k holds a slot.
func (a *Admitter) holds(k meta.ThreadKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.slots[k]
	return ok
}

// read returns the gauges' reading, taking a new one if the last is older
// than CacheFor.
func (a *Admitter) read() reading {
	a.gaugeMu.Lock()
	defer a.gaugeMu.Unlock()
	now := a.cfg.Now()
	if !a.readAt.IsZero() && now.Sub(a.readAt) < a.cfg.CacheFor {
		return a.reading
	}
	var r reading
	var err error
	if r.fds, r.fdLimit, err = a.cfg.Gauges.Descriptors(); err != nil {
		r.err = fmt.Errorf("count open descriptors: %w", err)
	} else if r.rss, r.osThreads, err = a.cfg.Gauges.Memory(); err != nil {
		r.err = fmt.Errorf("read memory and OS threads: %w", err)
	}
	a.reading, a.readAt = r, now
	return r
}

// refusal says why r admits no new thread under cfg, or nil.
func (r reading) refusal(cfg Config) error {
	switch {
	case r.err != nil:
		return &Refusal{LimitGauges, fmt.Sprintf("This server binds no new thread: it cannot measure its resources (%v).", r.err)}
	case r.fds+cfg.FDReserve >= r.fdLimit:
		return &Refusal{LimitDescriptors, fmt.Sprintf("This server has %d of its %d descriptors open, within its reserve of %d (the open-file limit, LimitNOFILE); close idle threads or raise the limit.", r.fds, r.fdLimit, cfg.FDReserve)}
	case r.rss >= cfg.MemoryCap:
		return &Refusal{LimitMemory, fmt.Sprintf("This server uses %d MiB of memory, its cap of %d MiB; close idle threads.", r.rss>>20, cfg.MemoryCap>>20)}
	case r.osThreads+cfg.OSThreadReserve >= cfg.OSThreadLimit:
		return &Refusal{LimitOSThreads, fmt.Sprintf("This server runs %d OS threads, within its reserve of %d below the limit of %d; close idle threads.", r.osThreads, cfg.OSThreadReserve, cfg.OSThreadLimit)}
	}
	return nil
}

// Headroom is what is used of each limit, and what a new thread would
// meet.
type Headroom struct {
	// Threads served, and the limit.
	Threads, MaxThreads int
	// TenantMost is the threads of the tenant that has the most, and
	// MaxThreadsPerTenant the limit of each.
	TenantMost, MaxThreadsPerTenant int
	// FDs open, the open-file limit and the reserve kept below it.
	FDs, FDLimit, FDReserve int
	// RSS is the resident memory, and MemoryCap where binds stop.
	RSS, MemoryCap int64
	// OSThreads of the process, the runtime's limit and the reserve.
	OSThreads, OSThreadLimit, OSThreadReserve int
	// Refused is why a new thread (of a tenant with none yet) would be
	// refused now, "" if it would be admitted; GaugeErr is set when a
	// gauge could not be read.
	Refused  string
	GaugeErr error
}

// Headroom reads the limits' use, with the cached gauges.
func (a *Admitter) Headroom() Headroom {
	r := a.read()
	a.mu.Lock()
	h := Headroom{
		Threads: len(a.slots), MaxThreads: a.cfg.MaxThreads, MaxThreadsPerTenant: a.cfg.MaxThreadsPerTenant,
		FDs: r.fds, FDLimit: r.fdLimit, FDReserve: a.cfg.FDReserve,
		RSS: r.rss, MemoryCap: a.cfg.MemoryCap,
		OSThreads: r.osThreads, OSThreadLimit: a.cfg.OSThreadLimit, OSThreadReserve: a.cfg.OSThreadReserve,
		GaugeErr: r.err,
	}
	for _, n := range a.perTenant {
		h.TenantMost = max(h.TenantMost, n)
	}
	a.mu.Unlock()
	if err := r.refusal(a.cfg); err != nil {
		h.Refused = err.Error()
	} else if h.Threads >= h.MaxThreads {
		h.Refused = fmt.Sprintf("This server serves %d threads, its limit (--max-threads).", h.Threads)
	}
	return h
}

// String says the headroom in one line, for logs and `warren doctor`.
func (h Headroom) String() string {
	s := fmt.Sprintf("threads %d of %d (--max-threads), busiest tenant %d of %d (--max-threads-per-tenant); descriptors %d of %d (reserve %d); memory %d of %d MiB; OS threads %d of %d (reserve %d)",
		h.Threads, h.MaxThreads, h.TenantMost, h.MaxThreadsPerTenant, h.FDs, h.FDLimit, h.FDReserve,
		h.RSS>>20, h.MemoryCap>>20, h.OSThreads, h.OSThreadLimit, h.OSThreadReserve)
	if h.Refused != "" {
		s += "; new threads refused: " + h.Refused
	}
	return s
}
