package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/fs"
	"warren/gateway/admit"
	"warren/gateway/events"
	"warren/gateway/images"
	"warren/gateway/lease"
	"warren/gateway/network"
	"warren/gateway/quota"
	"warren/gateway/threadlimit"
	"warren/gateway/threads"
	"warren/jail"
	"warren/meta"
	"warren/snapshot"
	"warren/snapshot/replica"
)

// Config configures a gateway. DataDir and Store are required; every other
// zero value works.
type Config struct {
	// DataDir holds the workspaces, the mount points and, by default, the
	// socket and the metadata store (see the package doc's Layout). It must
	// be an absolute path; Start creates it if it is missing.
	DataDir string
	// SocketPath is where the API listens; "" means DataDir/warren.sock.
	SocketPath string
	// SocketGID, if not zero, is the group the socket is given: its
	// members may open it (mode 0660); each still needs its uid allowed
	// (AllowUIDs). Zero leaves the daemon's own group.
	SocketGID int
	// WorkspacesDir holds the threads' backing folders; "" means
	// DataDir/workspaces. Servers without host ids may share one (a
	// shared disk): each binds any thread there.
	WorkspacesDir string
	// HostID is this host's stable id, written into every binding it makes.
	// With one, the gateway keeps a lease in the store and pins the threads
	// it serves (hosts.go); others refuse them while the lease holds. ""
	// means threads are not pinned (every host may bind them, e.g. a
	// shared disk).
	HostID string
	// RenewEvery and ExpiresAfter time the lease: a heartbeat every
	// RenewEvery; the host counts as gone ExpiresAfter after its last one.
	// Zero means DefaultRenewEvery and DefaultExpiresAfter.
	RenewEvery, ExpiresAfter time.Duration
	// OnUnreachable says what a gateway does with a thread it takes over
	// whose folder it cannot reach: UnreachableGone (the default) marks it
	// gone, UnreachableFresh starts a fresh workspace, and runs
	// SeedCommand in it if that is set (a clone, say);
	// UnreachableRestore (with a SnapshotStore) restores in a new
	// workspace the newest checkpoint the former host copied to the
	// store, and is UnreachableFresh for a thread with none.
	OnUnreachable string
	SeedCommand   string
	// BodyTimeout bounds how long a request's body may take to arrive,
	// from the end of its headers (which have ReadHeaderTimeout): a client
	// that stalls gets 408 and its connection closed, so stalled clients
	// cannot hold descriptors. It never cuts an answer: once the body is
	// read, the connection has no read deadline. 0 means
	// DefaultBodyTimeout.
	BodyTimeout time.Duration
	// EventLog is how many of the newest events are kept, in the data
	// folder, for a reader that comes back with since (package events);
	// 0 means DefaultEventLog, a negative number none.
	EventLog int
	// MetricsAddr, if set, is a TCP address (host:port) on which the
	// operational endpoints, /metrics, /healthz and /readyz, are served
	// with no authentication and nothing else (health.go). They are on
	// the socket too.
	MetricsAddr string
	// AllowUIDs are the peer uids allowed on the socket besides this
	// process's own uid and root.
	AllowUIDs []uint32
	// Logger receives structured logs; nil means no logs.
	Logger hclog.Logger
	// Store keeps bindings and inspection mounts. The caller opens it (see
	// MetaDir) and closes it after the gateway's Close.
	Store meta.Store
	// FUSETransport is how the threads' mounts are served:
	// fs.TransportClassic (the zero value), fs.TransportURing (a mount
	// fails if the kernel refuses it) or fs.TransportAuto (io_uring where
	// the kernel offers it).
	FUSETransport fs.Transport
	// FUSEPerThread serves each thread's mount on a FUSE connection of
	// its own, as warren did before shared connections: a reader thread
	// and several descriptors per bound thread. By default the threads'
	// mounts on the classic transport share a few connections (fs.Pool),
	// and an idle bound thread costs one descriptor and no OS thread.
	FUSEPerThread bool
	// NoFSMetrics leaves the FUSE requests untimed (no
	// warren_fuse_request_duration_seconds). It exists for benchmarks that
	// measure what timing them costs.
	NoFSMetrics bool
	// NoEditChecks switches off the refusal of writes based on stale
	// reads (fs.HubConfig.NoEditChecks). It exists for benchmarks that
	// measure what the checks cost; never set it in production.
	NoEditChecks bool
	// JailBinary is the program run as a jail's init (it calls
	// jail.RunInit when jail.IsInit); "" means this very binary.
	JailBinary string
	// JailNetwork, JailMemoryBytes and JailMaxProcs set up every thread's
	// jail (see jail.Config): "none" (the default), "egress" or "host"; 0
	// means the jail package's defaults.
	// These are defaults: a thread's settings (meta.Settings) win.
	JailNetwork     string
	JailMemoryBytes int64
	JailMaxProcs    int
	// AllowNetworks are the networks a thread may ask for (nil: none,
	// egress and host). With egress among them, the daemon runs an egress
	// network (package gateway/network): on EgressSubnet (the zero value
	// picks a free private /16), with the private ranges of
	// EgressAllowPrivate open to the jails, and a resolver that asks
	// EgressDNS (nil: the host's resolv.conf's servers).
	AllowNetworks      []string
	EgressSubnet       netip.Prefix
	EgressAllowPrivate []netip.Prefix
	EgressDNS          []netip.AddrPort
	// JailImage is the image of a thread whose settings name none
	// (package images); "" leaves them on the host-folder root.
	// ImageStoreBytes bounds the unpacked images together (a pull past
	// it is refused with 507; 0: none), ImageMaxBytes and
	// ImageMaxEntries one image's unpacked bytes and entries (0: the
	// store's defaults). Registries are the registries images may come
	// from (nil: any at a public address), RegistryAuth a Docker-style
	// config file with their credentials. ImageKeep is how long an image
	// no bound thread names is kept after its last use (0:
	// images.DefaultKeep).
	JailImage       string
	ImageStoreBytes int64
	ImageMaxBytes   int64
	ImageMaxEntries int
	Registries      []string
	RegistryAuth    string
	ImageKeep       time.Duration
	// JailCPUMillis bounds every thread's jail to so many thousandths of
	// a CPU (jail.Config.CPUMillis) unless its settings say otherwise; 0
	// means no bound.
	JailCPUMillis int
	// JailRlimits bounds jails with rlimits even where cgroups could
	// (jail.Config.Rlimits); for tests of hosts without cgroups.
	JailRlimits bool
	// JailPath is the PATH of the jails' commands: absolute folders as
	// the jail sees them, ':'-separated (CheckJailPath). A thread's or a
	// call's own PATH wins. "" means DefaultJailPath(), found at Start.
	// It is for jails on the host's folders: a jail on an image will take
	// the image's PATH instead (jails.Jails.Env).
	JailPath string
	// JailIdle stops a jail in which no command or job ran for so long,
	// and CloseIdle closes a thread nothing used for so long, unless the
	// thread's settings say otherwise (idle.go). 0 means
	// DefaultJailIdle and never closing; a negative value never.
	JailIdle, CloseIdle time.Duration
	// MaxJobs is how many background jobs a thread runs at once unless
	// its settings say otherwise; 0 means DefaultMaxJobs.
	MaxJobs int
	// DiskQuotaBytes is the disk quota of a thread whose settings give
	// none; 0 means none. DiskReserveBytes is the space all workspaces
	// together leave free; 0 means no reserve. Either needs workspaces on
	// btrfs (package quota); Start fails where they cannot be enforced.
	DiskQuotaBytes   int64
	DiskReserveBytes int64
	// SnapshotsDir holds the tenants' snapshot repositories, where the
	// checkpoints' content lives (checkpoints.go); "" means
	// DataDir/snapshots. Several servers may share one (a shared disk):
	// a thread's checkpoints then work on whichever serves it.
	SnapshotsDir string
	// SnapshotStore, if set, names the store (s3://BUCKET[/PREFIX]?endpoint=
	// HOST:PORT[&region=R][&insecure=1], see replica.NewS3) that every
	// checkpoint is copied to once taken (package gateway/replicas); the
	// repositories in SnapshotsDir stay where checkpoints are taken and
	// restored from. Start fails when the store cannot be opened.
	SnapshotStore string
	// SnapshotPendingEvery is how often, with a SnapshotStore, the paths
	// each thread changed since its last checkpoint go to the store, for
	// the note of a move (0: replicas.DefaultPendingEvery).
	SnapshotPendingEvery time.Duration
	// SnapshotCacheBytes bounds, with a SnapshotStore, the backlog: the
	// own bytes (what the snapshot quotas count) of the checkpoints not
	// yet copied to the store. A checkpoint that would take it past the
	// bound is refused with 507 "the snapshot store is unreachable" (see
	// replicas.Replicas.Admit). 0 means a quarter of the snapshots
	// folder's disk (snapshotCacheBytes); it may not be set without a
	// store.
	SnapshotCacheBytes int64
	// Checkpoints is how many checkpoints a thread keeps unless its
	// settings say otherwise; 0 means DefaultCheckpoints.
	Checkpoints int
	// CheckpointLimits bound what one checkpoint reads: entries listed
	// or looked at again, folders' depth, bytes of file content
	// (snapshot.Limits; zero fields mean snapshot's defaults: a million,
	// 512, 16 GiB). Past one the checkpoint is refused with 413
	// "too_large", naming the limit, and nothing of it is kept.
	CheckpointLimits snapshot.Limits
	// SnapshotQuotaBytes bounds the bytes a thread's kept checkpoints
	// reference unless its settings say otherwise; 0 means the thread's
	// disk quota, or none if it has none. TenantSnapshotQuotaBytes bounds
	// those of all a tenant's threads together; 0 means none. A
	// checkpoint past either drops the oldest checkpoints that may go, or
	// is refused (checkpoints.go, snapshotQuota).
	SnapshotQuotaBytes       int64
	TenantSnapshotQuotaBytes int64
	// StoreFreeBytes is the free space the metadata store keeps on the
	// disk of MetaDir (the embedded store's floor and ballast), 0 when the
	// store lives elsewhere. A reserve below it, on that same disk, is
	// warned about at start: full workspaces would stop the store's writes.
	StoreFreeBytes int64
	// Admission bounds what the API's clients hold at once: connections,
	// requests, request bodies, raw uploads and streams, each in total,
	// per peer uid and per thread (package admit). Past a bound a request
	// is refused at once with 503 "unavailable" and Retry-After. Zero
	// fields are derived from the open-file limit at Start
	// (admit.Limits.WithDefaults).
	Admission admit.Limits
	// MaxThreads bounds the threads this server serves at once (mounted,
	// or being mounted), and MaxThreadsPerTenant those of one tenant: a
	// bind of a new thread past either is refused with 503 "unavailable"
	// (package threadlimit); a thread served already keeps working. 0
	// derives MaxThreads from the machine (threadlimit.Machine: its
	// memory, open-file limit and fs.mount-max) and MaxThreadsPerTenant
	// as MaxThreads.
	MaxThreads, MaxThreadsPerTenant int
	// The reserves under which a new thread is refused too, whatever the
	// counts: FDReserve descriptors below the open-file limit,
	// MemoryCapBytes of resident memory, OSThreadReserve OS threads below
	// OSThreadLimit. 0 derives each from the machine (threadlimit.Machine).
	FDReserve       int
	MemoryCapBytes  int64
	OSThreadReserve int
	// OSThreadLimit is the Go runtime's limit of OS threads the process
	// runs under (the daemon sets it with debug.SetMaxThreads); 0 means
	// the runtime's default, DefaultOSThreadLimit.
	OSThreadLimit int
	// MaxJails bounds the jails alive at once: a thread that needs one at
	// the bound gets the least recently used idle jail's place (that jail
	// is stopped; its thread stays bound), or 503 "unavailable" if every
	// jail is busy (package jails). 0 means threadlimit.Machine.MaxJails: a
	// quarter of the memory at 16 MiB a jail, between 8 and 4096.
	MaxJails int

	// mounter serves the mounts; nil means threads.FUSEMounter, the FUSE filesystem
	// of package fs, which is the only implementation. It is a seam for
	// this package's tests alone: they wrap threads.FUSEMounter to count its mounts
	// or to make one fail, and every mount they get is a real one.
	mounter threads.Mounter
	// remountGate, if not nil, holds the background restore of the
	// threads (restore.go) until it is closed: a seam for this package's
	// tests, which look at a gateway that serves while no thread is
	// mounted again yet. A call's own thread is never held by it.
	remountGate chan struct{}
	// unmountDrain, if not 0, is inspect.Config.UnmountDrain (tests).
	unmountDrain time.Duration
	// checkpointHold, if not nil, is called by every history call that
	// takes its locks through withHistoryLocked (checkpoint, undo, redo,
	// revert, diff, the finish of a cut restore; not fork) once it holds
	// its thread's checkpoint lock and its repository's shared lock,
	// before it reads anything: a seam for this package's tests, which
	// hold a checkpoint there to look at what a slow one does to the
	// others.
	checkpointHold func(k meta.ThreadKey)
	// collectHook, if not nil, is called with a tenant and the steps of
	// its collections: snapshot's ("wait", "sweep"; see
	// snapshot.WithCollectHook), then "done". A seam for tests.
	collectHook func(tenant, step string)
	// storeCollectEvery and storeGrace, if positive, replace the snapshot
	// store's collection's period and grace (replicas.Config), and
	// storeCollectHook is told of each collection; for tests.
	storeCollectEvery, storeGrace time.Duration
	storeCollectHook              func(replica.SweepStats, error)
}

// Defaults of the lease (package hosts).
const (
	DefaultRenewEvery   = 10 * time.Second
	DefaultExpiresAfter = 30 * time.Second
)

// What a gateway does with a thread it takes over whose folder it cannot
// reach (Config.OnUnreachable).
const (
	UnreachableGone    = threads.UnreachableGone
	UnreachableFresh   = threads.UnreachableFresh
	UnreachableRestore = threads.UnreachableRestore
)

// goBin is where the Go toolchain's programs are on hosts that install
// it from go.dev's archives; the jails see /usr read-only, so it is
// there for them too.
const goBin = "/usr/local/go/bin"

// DefaultJailPath is Config.JailPath's default: jail.Path, and goBin
// after it if the host has that folder now.
func DefaultJailPath() string {
	if fi, err := os.Stat(goBin); err == nil && fi.IsDir() {
		return jail.Path + ":" + goBin
	}
	return jail.Path
}

// CheckJailPath refuses a PATH for the jails that is not ':'-separated
// absolute folders: an empty part (which a shell takes for the current
// folder, the workspace), a relative one, or a NUL byte.
func CheckJailPath(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("jail PATH %q holds a NUL byte", p)
	}
	for _, part := range strings.Split(p, ":") {
		if part == "" {
			return fmt.Errorf("jail PATH %q has an empty part (the current folder to a shell): give absolute folders, ':'-separated", p)
		}
		if !filepath.IsAbs(part) {
			return fmt.Errorf("jail PATH %q: %q is not an absolute folder", p, part)
		}
	}
	return nil
}

// MetaDir is where the metadata store of a gateway with dataDir lives.
func MetaDir(dataDir string) string { return filepath.Join(dataDir, "meta") }

// CheckLimits refuses numbers of c that no thread could work with: the
// jails' defaults get the bounds a thread's own settings get
// (checkSettings), so a bad default is refused at start rather than by
// every command later. Zero fields mean defaults and pass. A daemon's
// command line calls it before it opens anything.
func (c Config) CheckLimits() error {
	renew, expires := cmp.Or(c.RenewEvery, DefaultRenewEvery), cmp.Or(c.ExpiresAfter, DefaultExpiresAfter)
	if renew < minRenewEvery || expires <= renew+lease.Margin {
		return fmt.Errorf("renew-every %v must be at least %v, and expires-after %v longer than it and a margin of %v", renew, minRenewEvery, expires, lease.Margin)
	}
	if c.BodyTimeout < 0 {
		return fmt.Errorf("body timeout %v is negative", c.BodyTimeout)
	}
	if err := threads.CheckCPUMillis(c.JailCPUMillis); err != nil {
		return fmt.Errorf("jail CPU bound: %w", err)
	}
	if c.JailMemoryBytes != 0 && c.JailMemoryBytes < threads.MinMemoryBytes {
		return fmt.Errorf("jail memory %d is below %d bytes", c.JailMemoryBytes, threads.MinMemoryBytes)
	}
	if c.JailMaxProcs != 0 && (c.JailMaxProcs < threads.MinMaxProcs || c.JailMaxProcs > threads.MaxMaxProcs) {
		return fmt.Errorf("jail processes %d is not between %d and %d", c.JailMaxProcs, threads.MinMaxProcs, threads.MaxMaxProcs)
	}
	if c.MaxJobs != 0 && (c.MaxJobs < 1 || c.MaxJobs > threads.MaxMaxJobs) {
		return fmt.Errorf("max jobs %d is not between 1 and %d", c.MaxJobs, threads.MaxMaxJobs)
	}
	if c.Checkpoints < 0 || c.Checkpoints > maxCheckpoints {
		return fmt.Errorf("checkpoints %d is not between 1 and %d", c.Checkpoints, maxCheckpoints)
	}
	if l := c.CheckpointLimits; l.Entries < 0 || l.Bytes < 0 || l.Depth < 0 || l.Depth > snapshot.MaxDepth {
		return fmt.Errorf("checkpoint limits: entries %d and bytes %d must not be negative, depth %d must be between 1 and %d",
			l.Entries, l.Bytes, l.Depth, snapshot.MaxDepth)
	}
	if c.DiskQuotaBytes < 0 || c.DiskReserveBytes < 0 {
		return fmt.Errorf("disk quota %d and reserve %d must not be negative", c.DiskQuotaBytes, c.DiskReserveBytes)
	}
	if c.ImageStoreBytes < 0 || c.ImageMaxBytes < 0 || c.ImageMaxEntries < 0 || c.ImageKeep < 0 {
		return fmt.Errorf("image store bytes %d, image max bytes %d, image max entries %d and image keep %s must not be negative",
			c.ImageStoreBytes, c.ImageMaxBytes, c.ImageMaxEntries, c.ImageKeep)
	}
	if c.DiskReserveBytes > 0 && c.ImageStoreBytes >= c.DiskReserveBytes {
		// The images live beside the metadata store, in the space the
		// workspaces leave free: a store as big as the reserve would
		// take all of it.
		return fmt.Errorf("image store bytes %d must be below the disk reserve of %d: the images live in it", c.ImageStoreBytes, c.DiskReserveBytes)
	}
	if c.JailImage != "" {
		if _, err := images.Normalise(c.JailImage); err != nil {
			return fmt.Errorf("jail image: %w", err)
		}
	}
	if c.DiskQuotaBytes != 0 && c.DiskQuotaBytes < quota.MinDiskBytes {
		return fmt.Errorf("disk quota %d is below %d", c.DiskQuotaBytes, quota.MinDiskBytes)
	}
	if c.SnapshotQuotaBytes < 0 || c.TenantSnapshotQuotaBytes < 0 {
		return fmt.Errorf("snapshot quota %d and tenant snapshot quota %d must not be negative", c.SnapshotQuotaBytes, c.TenantSnapshotQuotaBytes)
	}
	if c.SnapshotCacheBytes < 0 {
		return fmt.Errorf("snapshot cache bytes %d must not be negative", c.SnapshotCacheBytes)
	}
	if c.SnapshotCacheBytes > 0 && c.SnapshotStore == "" {
		// Without a store nothing waits to be copied: a bound there
		// would bound nothing, and says the operator meant a store.
		return fmt.Errorf("snapshot cache bytes %d needs a snapshot store (--snapshots s3://...)", c.SnapshotCacheBytes)
	}
	if c.MaxThreads < 0 || c.MaxThreadsPerTenant < 0 || c.MaxJails < 0 {
		return fmt.Errorf("max threads %d, per tenant %d and max jails %d must not be negative", c.MaxThreads, c.MaxThreadsPerTenant, c.MaxJails)
	}
	if c.FDReserve < 0 || c.MemoryCapBytes < 0 || c.OSThreadReserve < 0 || c.OSThreadLimit < 0 {
		return fmt.Errorf("descriptor reserve %d, memory cap %d, OS thread reserve %d and OS thread limit %d must not be negative",
			c.FDReserve, c.MemoryCapBytes, c.OSThreadReserve, c.OSThreadLimit)
	}
	if limit := cmp.Or(c.OSThreadLimit, DefaultOSThreadLimit); c.OSThreadReserve >= limit {
		return fmt.Errorf("OS thread reserve %d leaves no room below the limit of %d", c.OSThreadReserve, limit)
	}
	if c.FDReserve != 0 && uint64(c.FDReserve) >= fileLimit() {
		return fmt.Errorf("descriptor reserve %d leaves no room below the open-file limit of %d", c.FDReserve, fileLimit())
	}
	if err := c.Admission.Check(fileLimit()); err != nil {
		return err
	}
	return nil
}

// fileLimit is the process's open-file limit (the soft one, which the
// daemon raises to the hard one at start: fs.RaiseFileLimit); 1024 if it
// cannot be read.
func fileLimit() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return lim.Cur
}

// DefaultOSThreadLimit is Config.OSThreadLimit's default: the Go
// runtime's own limit of OS threads when nobody called
// debug.SetMaxThreads.
const DefaultOSThreadLimit = 10000

// threadLimits is the admission config of c (package threadlimit): the
// limits c gives, the others derived from machine m.
func (c Config) threadLimits(m threadlimit.Machine) threadlimit.Config {
	tc := m.Config(c.MaxThreads, c.MaxThreadsPerTenant)
	if c.FDReserve != 0 {
		tc.FDReserve = c.FDReserve
	}
	if c.MemoryCapBytes != 0 {
		tc.MemoryCap = c.MemoryCapBytes
	}
	if c.OSThreadReserve != 0 {
		tc.OSThreadReserve = c.OSThreadReserve
	}
	return tc
}

// DefaultEventLog is Config.EventLog's default.
const DefaultEventLog = events.DefaultLogSize

// DefaultBodyTimeout is Config.BodyTimeout's default: the socket is local,
// so the largest body (a 16 MiB file write) arrives in well under a
// second; the rest is room for a loaded host.
const DefaultBodyTimeout = 30 * time.Second

// minRenewEvery bounds how often a host renews its lease: more often
// would only load the store.
const minRenewEvery = 100 * time.Millisecond

// withDefaults checks c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		return c, fmt.Errorf("config: data dir %q must be an absolute path", c.DataDir)
	}
	c.DataDir = filepath.Clean(c.DataDir)
	if c.Store == nil {
		return c, errors.New("config: no metadata store")
	}
	if c.SocketPath == "" {
		c.SocketPath = api.DefaultSocket(c.DataDir)
	}
	if c.JailPath == "" {
		c.JailPath = DefaultJailPath()
	} else if err := CheckJailPath(c.JailPath); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if c.WorkspacesDir == "" {
		c.WorkspacesDir = filepath.Join(c.DataDir, "workspaces")
	}
	if !filepath.IsAbs(c.WorkspacesDir) {
		return c, fmt.Errorf("config: workspaces folder %q must be absolute", c.WorkspacesDir)
	}
	c.WorkspacesDir = filepath.Clean(c.WorkspacesDir)
	if c.SnapshotsDir == "" {
		c.SnapshotsDir = filepath.Join(c.DataDir, "snapshots")
	}
	if !filepath.IsAbs(c.SnapshotsDir) {
		return c, fmt.Errorf("config: snapshots folder %q must be absolute", c.SnapshotsDir)
	}
	c.SnapshotsDir = filepath.Clean(c.SnapshotsDir)
	if !filepath.IsAbs(c.SocketPath) {
		return c, fmt.Errorf("config: socket path %q must be absolute", c.SocketPath)
	}
	c.SocketPath = filepath.Clean(c.SocketPath)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.mounter == nil {
		c.mounter = threads.FUSEMounter{}
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = DefaultRenewEvery
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.ExpiresAfter == 0 {
		c.ExpiresAfter = DefaultExpiresAfter
	}
	if err := c.CheckLimits(); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if c.AllowNetworks == nil {
		c.AllowNetworks = network.Modes
	}
	for _, m := range c.AllowNetworks {
		if !slices.Contains(network.Modes, m) {
			return c, fmt.Errorf("config: allowed network %q is not none, egress or host", m)
		}
	}
	if mode := cmp.Or(c.JailNetwork, "none"); !slices.Contains(c.AllowNetworks, mode) {
		return c, fmt.Errorf("config: the jails' default network %s is not among the allowed ones (%s)", mode, strings.Join(c.AllowNetworks, ", "))
	}
	switch c.OnUnreachable {
	case "":
		c.OnUnreachable = UnreachableGone
	case UnreachableGone, UnreachableFresh:
	case UnreachableRestore:
		if c.SnapshotStore == "" {
			return c, fmt.Errorf("config: on-unreachable restore needs a snapshot store (--snapshots s3://…): a thread moves with the checkpoints its former host copied there")
		}
	default:
		return c, fmt.Errorf("config: on-unreachable %q is not gone, fresh or restore", c.OnUnreachable)
	}
	return c, nil
}

// snapshotCacheBytes is the bound of the checkpoints waiting for the
// snapshot store: the configured one, else a quarter of the disk of the
// snapshots folder (its nearest folder that exists), where their objects
// are; 0 (no bound) if that cannot be read.
//
// Why a bound by default, and that one: the backlog is what this server
// holds that no other can reach (what a thread moved to another server
// would lose, and objects a local cache could not evict), so an outage
// of the store must not let it grow without end; but the agents'
// checkpoints should go on through an outage of the store, which is not
// theirs to fix. A quarter of the disk, the images' default share, lets
// the backlog grow large before it refuses anything while it cannot
// take the disk from the workspaces.
func snapshotCacheBytes(c Config) int64 {
	if c.SnapshotCacheBytes > 0 {
		return c.SnapshotCacheBytes
	}
	dir := c.SnapshotsDir
	var st unix.Statfs_t
	for {
		err := unix.Statfs(dir, &st)
		if err == nil {
			return int64(st.Blocks) * st.Bsize / 4
		}
		up := filepath.Dir(dir)
		if !errors.Is(err, unix.ENOENT) || up == dir {
			return 0
		}
		dir = up
	}
}

// imageStoreBytes is the bound of the image store: the configured one,
// else half the disk reserve (the images live in the space the
// workspaces leave free), else a quarter of the data folder's disk.
func imageStoreBytes(c Config) int64 {
	switch {
	case c.ImageStoreBytes > 0:
		return c.ImageStoreBytes
	case c.DiskReserveBytes > 0:
		return c.DiskReserveBytes / 2
	}
	var st unix.Statfs_t
	if err := unix.Statfs(c.DataDir, &st); err != nil {
		return 0 // the store then has no bound; the disk's own fullness refuses
	}
	return int64(st.Blocks) * st.Bsize / 4
}
