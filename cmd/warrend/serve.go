package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/gateway"
	"warren/gateway/admit"
	"warren/image"
	"warren/internal/cli"
	"warren/internal/diskimage"
	"warren/jail"
	"warren/meta"
	"warren/meta/badger"
	"warren/meta/etcd"
	"warren/snapshot"
)

// serveOptions are the flags of warrend (warren serve).
type serveOptions struct {
	// flagErrs are the mistakes found while parsing, said together with
	// those serve finds in the values (all at once).
	flagErrs   []error
	dataDir    string
	socket     string
	workspaces string
	hostID     string
	allowUIDs  uidList
	// The jails' networks.
	allowNetworks string
	egressSubnet  string
	egressPrivate cli.Strings
	egressDNS     cli.Strings
	logLevel      string
	logJSON       bool
	// noEditChecks switches off the refusal of stale writes; benchmarks
	// set it to measure what the checks cost. noFSMetrics leaves the FUSE
	// requests untimed, for the same reason.
	noEditChecks bool
	noFSMetrics  bool
	// fuseTransport serves the mounts over /dev/fuse (classic), io_uring
	// (uring) or whichever the kernel offers (auto).
	fusePerThread bool
	fuseTransport string
	// The jails of the threads.
	jailNetwork string
	jailMemory  int64
	jailProcs   int
	jailCPU     cli.CPU
	jailPath    string // "": gateway.DefaultJailPath at start
	// The metadata store, and this host's lease in it.
	store         string
	etcdEndpoints string
	etcdPrefix    string
	bodyTimeout   time.Duration
	renewEvery    time.Duration
	expiresAfter  time.Duration
	onUnreachable string
	seedCommand   string

	// Disk: each thread's default quota, and the reserve all workspaces
	// leave free.
	diskQuota, diskReserve int64
	// snapshotQuota and tenantSnapshotQuota bound the checkpoints' bytes.
	snapshotQuota, tenantSnapshotQuota int64
	// The disk image the workspaces and snapshots go on (auto, on, off),
	// and its size (0: what leaves the host's reserve free).
	diskImage     string
	diskImageSize int64
	loopControl   string // $WARREN_LOOP_CONTROL: tests name a missing one
	// Checkpoints: where their content lives, and how many a thread keeps.
	snapshots   string
	checkpoints int
	// snapshotCache bounds the checkpoints waiting for an s3 store.
	snapshotCache int64
	// snapshotPendingEvery times the reports of changes since the last
	// checkpoint to the store.
	snapshotPendingEvery time.Duration
	// cpLimits bound what one checkpoint reads.
	cpLimits snapshot.Limits
	// metricsAddr is the TCP address of the operational endpoints.
	metricsAddr string
	// eventLog is how many events are kept for replay.
	eventLog int
	// socketGroup is the group the socket is given ("": the daemon's).
	socketGroup string
	// Idle reclaim: of jails, and of threads.
	jailIdle, closeIdle time.Duration
	// admission bounds what API clients hold at once (--max-conns,
	// --max-requests, --max-bodies, --max-uploads, --max-streams).
	admission admit.Limits
	// Threads served (--max-threads, --max-threads-per-tenant), the
	// reserves under which new ones are refused, and the live jails.
	maxThreads, maxThreadsPerTenant int
	fdReserve, osThreadReserve      int
	memoryCap                       int64
	maxJails                        int
	// The images (--jail-image, --registries...).
	jailImage, registries, registryAuth string
	imageStoreBytes, imageMaxBytes      int64
	imageMaxEntries                     int
	imageKeep                           time.Duration
}

// maxOSThreads is the limit of OS threads the daemon's Go runtime runs
// under (debug.SetMaxThreads; the runtime's own default is 10,000): a
// FUSE request or a store call blocked in the kernel holds one, and past
// the limit the runtime kills the process. The admission of new threads
// keeps a reserve below it (--os-thread-reserve).
const maxOSThreads = 20000

// boundFlag is a --max-KIND flag: TOTAL[,PER-UID[,PER-THREAD]], each
// empty or 0 for its default (admit.Limits.WithDefaults).
type boundFlag struct {
	b       *admit.Bound
	perUser bool // the kind has a per-thread bound
}

func (f boundFlag) String() string {
	if f.b == nil {
		return ""
	}
	return fmt.Sprintf("%d,%d,%d", f.b.Total, f.b.PerUID, f.b.PerThread)
}

func (f boundFlag) Set(v string) error {
	parts := strings.Split(v, ",")
	if len(parts) > 3 || !f.perUser && len(parts) > 2 {
		return fmt.Errorf("%q has too many numbers", v)
	}
	fields := []*int{&f.b.Total, &f.b.PerUID, &f.b.PerThread}
	for i, p := range parts {
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a number of 0 or more", p)
		}
		*fields[i] = n
	}
	return nil
}

// uidList is a repeatable --allow-uid flag.
type uidList []uint32

func (u *uidList) String() string {
	s := make([]string, len(*u))
	for i, v := range *u {
		s[i] = strconv.FormatUint(uint64(v), 10)
	}
	return strings.Join(s, ",")
}

func (u *uidList) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return fmt.Errorf("not a uid: %q", v)
	}
	*u = append(*u, uint32(n))
	return nil
}

// serveCmd parses the daemon's flags and runs it; name is how it was
// called, for its usage and errors.
func serveCmd(ctx context.Context, e *cli.Env, name string, args []string) error {
	var o serveOptions
	fs := cli.NewFlags(e, name, "[--data DIR] [--socket PATH] [--host-id ID] [--store badger|etcd --etcd-endpoints URL,...] [--allow-uid N]... [--log-level L] [--log-json]")
	fs.StringVar(&o.dataDir, "data", cli.DefaultDataDir(e.Getenv), "data folder: metadata, workspaces, mounts")
	fs.StringVar(&o.socket, "socket", "", "API socket (default DATA/warren.sock)")
	fs.StringVar(&o.workspaces, "workspaces", "", "folder of the threads' workspaces (default DATA/workspaces); servers without a host id may share one")
	fs.StringVar(&o.hostID, "host-id", "", "stable id of this host; pins its threads to it (default: not pinned)")
	fs.StringVar(&o.socketGroup, "socket-group", "", "group (name or gid) the socket is given, so its members may open it (default the daemon's group)")
	fs.Var(&o.allowUIDs, "allow-uid", "uid allowed on the socket besides root and the server's own (repeatable)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON lines")
	fs.BoolVar(&o.noEditChecks, "no-edit-checks", false, "for benchmarks only: do not refuse writes based on stale reads")
	fs.BoolVar(&o.noFSMetrics, "no-fs-metrics", false, "for benchmarks only: do not time the FUSE requests")
	fs.StringVar(&o.fuseTransport, "fuse-transport", "classic", "how the mounts' FUSE requests come: classic (/dev/fuse), uring (FUSE over io_uring; a mount fails without it) or auto (io_uring where the kernel offers it)")
	fs.BoolVar(&o.fusePerThread, "fuse-per-thread", false, "serve each thread's mount on a FUSE connection of its own (a reader thread and several descriptors per bound thread) instead of the shared connections")
	fs.StringVar(&o.jailNetwork, "jail-network", "none", "network of the threads' jails: none (loopback only), egress (NATed out under each thread's rules) or host")
	fs.StringVar(&o.allowNetworks, "allow-networks", "none,egress,host", "the networks threads may ask for, comma-separated")
	fs.StringVar(&o.egressSubnet, "egress-subnet", "", "IPv4 range of the egress jails' addresses, /16 to /24 (default: a free private /16)")
	fs.Var(&o.egressPrivate, "egress-allow-private", "a private range (CIDR) egress jails may reach, such as a package mirror (repeatable)")
	fs.Var(&o.egressDNS, "egress-dns", "a name server (IP or IP:port) the jails' resolver asks (repeatable; default: those of /etc/resolv.conf)")
	fs.StringVar(&o.jailImage, "jail-image", "", "the OCI image whose filesystem is the root of a jail whose thread names none (node:22, registry:5000/team/py:3.12); default: the host's folders, read-only")
	fs.StringVar(&o.registries, "registries", "", "the registries images may come from, host[:port], comma-separated; only these, and a loopback or private address only when named here (default: any registry at a public address)")
	fs.StringVar(&o.registryAuth, "registry-auth", "", "a Docker-style config.json with the registries' credentials (default: anonymous)")
	fs.Int64Var(&o.imageStoreBytes, "image-store-bytes", 0, "bytes the unpacked images may take together; a pull past it gets 507 (default: half the --disk-reserve, else a quarter of the data folder's disk)")
	fs.Int64Var(&o.imageMaxBytes, "image-max-bytes", 0, "unpacked bytes of one image; a larger one is refused (default 8 GiB)")
	fs.IntVar(&o.imageMaxEntries, "image-max-entries", 0, "files, folders and links of one image; one with more is refused (default 1,000,000)")
	fs.DurationVar(&o.imageKeep, "image-keep", 7*24*time.Hour, "how long an image no bound thread names is kept after its last use")
	fs.Int64Var(&o.jailMemory, "jail-memory", 0, "memory of each thread's jail, in bytes (default 2 GiB)")
	fs.IntVar(&o.jailProcs, "jail-procs", 0, "processes of each thread's jail (default 1024)")
	fs.Var(&o.jailCPU, "jail-cpu", "CPU time of each thread's jail: CPUs (0.5, 2) or thousandths of a CPU (500m) (default no bound)")
	fs.StringVar(&o.jailPath, "jail-path", "", "PATH of the commands in the jails: absolute folders, ':'-separated; a thread's or a call's own PATH wins (default "+jail.Path+", and /usr/local/go/bin after it if the host has that folder at start)")
	fs.StringVar(&o.store, "store", "badger", "metadata store: badger (embedded, one server) or etcd (several servers)")
	fs.StringVar(&o.etcdEndpoints, "etcd-endpoints", "", "etcd client URLs, comma-separated (with --store etcd)")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", "warren/", "prefix of warren's keys in etcd")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", gateway.DefaultBodyTimeout, "how long a request's body may take to arrive; a client that stalls longer gets 408")
	fs.DurationVar(&o.renewEvery, "renew-every", gateway.DefaultRenewEvery, "how often this host renews its lease (with --host-id)")
	fs.DurationVar(&o.expiresAfter, "expires-after", gateway.DefaultExpiresAfter, "how long after its last renewal a host counts as gone")
	fs.StringVar(&o.onUnreachable, "on-unreachable", gateway.UnreachableGone, "a taken-over thread whose folder is not reachable here: gone, fresh (a new workspace), or restore (a new workspace holding the newest checkpoint its former host copied to the --snapshots store; fresh if none)")
	fs.StringVar(&o.seedCommand, "seed-command", "", "with --on-unreachable fresh (or restore, for a thread with no copied checkpoint): a command run in the new workspace's jail (a clone, say)")
	fs.Int64Var(&o.diskQuota, "disk-quota", 0, "disk quota of each thread's workspace, in bytes (default none; needs workspaces on btrfs)")
	fs.Int64Var(&o.diskReserve, "disk-reserve", 0, "bytes of the workspaces' disk that their writes leave free (default none; needs workspaces on btrfs)")
	fs.StringVar(&o.diskImage, "disk-image", diskimage.ModeAuto, "put the workspaces and snapshots on a btrfs filesystem of their own, in the preallocated image DATA/disk.img, so that their quotas and reserve hold where the data folder's filesystem cannot enforce quotas: auto (where it cannot, and the workspaces are the data folder's own; else the log and warren doctor say \"disk unprotected\" and why), on (refuse to start without it) or off")
	fs.Int64Var(&o.diskImageSize, "disk-image-size", 0, "bytes of the disk image (default: what leaves a tenth of the host's filesystem, at least 256 MiB, free when it is made); a larger size grows it at start")
	fs.DurationVar(&o.snapshotPendingEvery, "snapshot-pending-every", 0, "with --snapshots s3://…: how often the paths each thread changed since its last checkpoint go to the store, so that a thread that moves (--on-unreachable restore) tells the model what was lost (default 10s)")
	fs.StringVar(&o.snapshots, "snapshots", "", "folder of the tenants' snapshot repositories, the checkpoints' content (default DATA/snapshots); servers may share one. Or a store every checkpoint is copied to once taken, s3://BUCKET[/PREFIX]?endpoint=HOST:PORT[&region=R][&insecure=1] (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or the shared credentials file); the repositories then stay in DATA/snapshots")
	fs.Int64Var(&o.snapshotCache, "snapshot-cache-bytes", 0, "with --snapshots s3://...: bytes of checkpoints not yet copied to the store that this server keeps waiting (what the snapshot quotas count of them); past it a checkpoint is refused with 507 (default a quarter of the snapshots folder's disk)")
	fs.Int64Var(&o.snapshotQuota, "snapshot-quota", 0, "bytes each thread's kept checkpoints may reference, unless its settings say otherwise (default its disk quota, or none)")
	fs.Int64Var(&o.tenantSnapshotQuota, "tenant-snapshot-quota", 0, "bytes the kept checkpoints of all a tenant's threads may reference together (default none)")
	fs.IntVar(&o.checkpoints, "checkpoints", gateway.DefaultCheckpoints, "how many checkpoints a thread keeps unless its settings say otherwise")
	fs.Int64Var(&o.cpLimits.Entries, "checkpoint-max-entries", snapshot.DefaultMaxEntries, "most entries one checkpoint lists or looks at again; past it the checkpoint is refused")
	fs.IntVar(&o.cpLimits.Depth, "checkpoint-max-depth", snapshot.MaxDepth, fmt.Sprintf("most folders nested below a workspace's root that a checkpoint reads (at most %d); past it the checkpoint is refused", snapshot.MaxDepth))
	fs.Int64Var(&o.cpLimits.Bytes, "checkpoint-max-bytes", snapshot.DefaultMaxBytes, "most bytes of file content one checkpoint reads; past it the checkpoint is refused")
	fs.DurationVar(&o.jailIdle, "jail-idle", gateway.DefaultJailIdle, "stop a thread's jail once no command or job ran in it for so long (the next command starts a new one); 0: never. A thread's settings win")
	fs.DurationVar(&o.closeIdle, "close-idle", 0, "close a thread (unmount it, keep its folder) once nothing used it for so long; 0: never. A thread's settings win")
	fs.IntVar(&o.eventLog, "event-log", gateway.DefaultEventLog, "how many of the newest events are kept, across restarts, for a reader that comes back with ?since=N; 0: none")
	fs.Var(boundFlag{b: &o.admission.Conns}, "max-conns", "open API connections: TOTAL[,PER-UID]; a connection past them is answered 503 and closed (default from the open-file limit: an eighth of it, per uid three quarters of that)")
	fs.Var(boundFlag{b: &o.admission.Requests, perUser: true}, "max-requests", "requests being answered: TOTAL[,PER-UID[,PER-THREAD]], empty or 0 for a default (default: as connections, 32 per thread)")
	fs.Var(boundFlag{b: &o.admission.Bodies, perUser: true}, "max-bodies", "request bodies still arriving: TOTAL[,PER-UID[,PER-THREAD]] (default: a 32nd of the open-file limit, 8 per thread)")
	fs.Var(boundFlag{b: &o.admission.Uploads, perUser: true}, "max-uploads", "raw uploads (PUT files/raw) under way: TOTAL[,PER-UID[,PER-THREAD]] (default: a 32nd of the open-file limit, 4 per thread)")
	fs.Var(boundFlag{b: &o.admission.Streams, perUser: true}, "max-streams", "streams (events, exec output, job output, raw reads): TOTAL[,PER-UID[,PER-THREAD]] (default: a 16th of the open-file limit, 16 per thread)")
	fs.IntVar(&o.maxThreads, "max-threads", 0, "threads this server serves at once; a bind of a new thread past it gets 503 (default from the machine: what half its memory holds at 100 KiB a thread, what the open-file limit holds above its reserve at one descriptor a thread, and half of fs.mount-max, the least of the three)")
	fs.IntVar(&o.maxThreadsPerTenant, "max-threads-per-tenant", 0, "threads of one tenant this server serves at once (default: --max-threads)")
	fs.IntVar(&o.fdReserve, "fd-reserve", 0, "descriptors below the open-file limit at which new threads are refused, kept for connections, uploads, jails and the store (default: a fifth of the limit, at least 256)")
	fs.Int64Var(&o.memoryCap, "memory-cap", 0, "resident memory of the daemon, in bytes, at which new threads are refused (default: half the machine's memory, or of its cgroup's memory.max)")
	fs.IntVar(&o.osThreadReserve, "os-thread-reserve", 0, fmt.Sprintf("OS threads below the runtime's limit of %d at which new threads are refused (default: a tenth of it)", maxOSThreads))
	fs.IntVar(&o.maxJails, "max-jails", 0, "jails alive at once; past it a new jail takes the place of the least recently used idle one (its thread stays bound), and a command gets 503 when every jail is busy (default: a quarter of the machine's memory at 16 MiB a jail, between 8 and 4096)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "TCP host:port serving /metrics, /healthz and /readyz only, without authentication (default: on the socket only)")
	rest, errs := cli.ParseAll(fs, args)
	if len(errs) > 0 && errors.Is(errs[0], flag.ErrHelp) {
		return flag.ErrHelp
	}
	o.flagErrs = errs
	if len(rest) > 0 {
		o.flagErrs = append(o.flagErrs, fmt.Errorf("unexpected arguments %q", rest))
	}
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		o.flagErrs = append(o.flagErrs, fmt.Errorf("unknown log level %q", o.logLevel))
		level = hclog.Info
	}
	o.loopControl = e.Getenv(diskimage.LoopControlEnv)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "warren",
		Level:      level,
		Output:     e.Stderr,
		JSONFormat: o.logJSON,
	})
	return serve(ctx, log, o)
}

// serve runs the gateway until ctx is done: it creates the data folder,
// opens the metadata store in it and serves the API.
func serve(ctx context.Context, log hclog.Logger, o serveOptions) error {
	// Every mistake in the flags is said at once, before anything is
	// opened.
	bad := o.flagErrs
	if o.jailNetwork != "" && o.jailNetwork != "none" && o.jailNetwork != "egress" && o.jailNetwork != "host" {
		bad = append(bad, fmt.Errorf("--jail-network is none, egress or host, not %q", o.jailNetwork))
	}
	nets, netErrs := networkFlags(o)
	bad = append(bad, netErrs...)
	if m := int(o.jailCPU); m != 0 && (m < jail.MinCPUMillis || m > gateway.MaxCPUMillis) {
		bad = append(bad, fmt.Errorf("--jail-cpu is between %s and %s CPUs, not %s", cli.CPU(jail.MinCPUMillis), cli.CPU(gateway.MaxCPUMillis), o.jailCPU))
	}
	if o.jailPath != "" {
		if err := gateway.CheckJailPath(o.jailPath); err != nil {
			bad = append(bad, fmt.Errorf("--jail-path: %v", err))
		}
	}
	if _, err := storeFlags(o); err != nil {
		bad = append(bad, err)
	}
	if m := o.diskImage; m != "" && m != diskimage.ModeAuto && m != diskimage.ModeOn && m != diskimage.ModeOff {
		bad = append(bad, fmt.Errorf("--disk-image is auto, on or off, not %q", m))
	}
	if o.registryAuth != "" {
		if _, err := os.Stat(o.registryAuth); err != nil {
			bad = append(bad, fmt.Errorf("--registry-auth: %v", err))
		}
	}
	if o.jailImage != "" {
		if _, err := image.ParseRef(o.jailImage); err != nil {
			bad = append(bad, fmt.Errorf("--jail-image: %v", err))
		}
	}
	for _, r := range splitList(o.registries) {
		if strings.ContainsAny(r, "/ @") {
			bad = append(bad, fmt.Errorf("--registries names registries as host or host:port, not %q", r))
		}
	}
	if o.imageKeep < 0 {
		bad = append(bad, fmt.Errorf("--image-keep is a positive duration, not %s", o.imageKeep))
	}
	if o.diskImageSize < 0 {
		bad = append(bad, fmt.Errorf("--disk-image-size is not negative, not %d", o.diskImageSize))
	}
	transport, err := fuseTransport(log, o.fuseTransport)
	if err != nil {
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			return err
		}
		bad = append(bad, err)
	}
	// The configuration the flags give; the folders, the logger and the
	// store are filled in once they are made.
	cfg := gateway.Config{
		FUSETransport:      transport,
		FUSEPerThread:      o.fusePerThread,
		HostID:             o.hostID,
		MetricsAddr:        o.metricsAddr,
		EventLog:           eventLogFlag(o.eventLog),
		JailIdle:           neverIfZero(o.jailIdle),
		CloseIdle:          neverIfZero(o.closeIdle),
		AllowUIDs:          o.allowUIDs,
		NoEditChecks:       o.noEditChecks,
		NoFSMetrics:        o.noFSMetrics,
		JailNetwork:        o.jailNetwork,
		AllowNetworks:      nets.allow,
		EgressSubnet:       nets.subnet,
		EgressAllowPrivate: nets.private,
		EgressDNS:          nets.dns,
		JailMemoryBytes:    o.jailMemory,
		JailMaxProcs:       o.jailProcs,
		JailCPUMillis:      int(o.jailCPU),
		JailPath:           o.jailPath,
		RenewEvery:         o.renewEvery,
		BodyTimeout:        o.bodyTimeout,
		ExpiresAfter:       o.expiresAfter,
		OnUnreachable:      o.onUnreachable,
		SeedCommand:        o.seedCommand,
		JailImage:          o.jailImage,
		Registries:         splitList(o.registries),
		RegistryAuth:       o.registryAuth,
		ImageStoreBytes:    o.imageStoreBytes,
		ImageMaxBytes:      o.imageMaxBytes,
		ImageMaxEntries:    o.imageMaxEntries,
		ImageKeep:          o.imageKeep,

		DiskQuotaBytes:           o.diskQuota,
		DiskReserveBytes:         o.diskReserve,
		Checkpoints:              o.checkpoints,
		CheckpointLimits:         o.cpLimits,
		SnapshotQuotaBytes:       o.snapshotQuota,
		TenantSnapshotQuotaBytes: o.tenantSnapshotQuota,
		SnapshotCacheBytes:       o.snapshotCache,
		Admission:                o.admission,

		MaxThreads:          o.maxThreads,
		MaxThreadsPerTenant: o.maxThreadsPerTenant,
		FDReserve:           o.fdReserve,
		MemoryCapBytes:      o.memoryCap,
		OSThreadReserve:     o.osThreadReserve,
		OSThreadLimit:       maxOSThreads,
		MaxJails:            o.maxJails,
	}
	// A store URL leaves the repositories in their default folder, which
	// then holds what this server took and fetched.
	if strings.HasPrefix(o.snapshots, "s3://") {
		cfg.SnapshotStore = o.snapshots
	}
	if o.socketGroup != "" {
		gid, err := lookupGroup(o.socketGroup)
		if err != nil {
			bad = append(bad, fmt.Errorf("--socket-group: %v", err))
		}
		cfg.SocketGID = gid
	}
	// A daemon that started with a bound no jail can have would fail
	// every command.
	if err := cfg.CheckLimits(); err != nil {
		bad = append(bad, fmt.Errorf("bad flag: %v", err))
	}
	if len(bad) > 0 {
		return badFlags(bad)
	}
	dataDir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return fmt.Errorf("data folder: %w", err)
	}
	socket := o.socket
	if socket != "" {
		if socket, err = filepath.Abs(socket); err != nil {
			return fmt.Errorf("socket path: %w", err)
		}
	}
	workspaces := o.workspaces
	if workspaces != "" {
		if workspaces, err = filepath.Abs(workspaces); err != nil {
			return fmt.Errorf("workspaces folder: %w", err)
		}
	}
	snapshotsDir := o.snapshots
	if cfg.SnapshotStore != "" {
		snapshotsDir = ""
		cfg.SnapshotPendingEvery = o.snapshotPendingEvery
	}
	if snapshotsDir != "" {
		if cfg.SnapshotsDir, err = filepath.Abs(snapshotsDir); err != nil {
			return fmt.Errorf("snapshots folder: %w", err)
		}
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create data folder: %w", err)
	}
	// The runtime's limit of OS threads, which the admission of threads
	// keeps its reserve below (cfg.OSThreadLimit).
	debug.SetMaxThreads(maxOSThreads)
	// Each mount holds a descriptor per inode the kernel knows.
	if err := fs.RaiseFileLimit(); err != nil {
		log.Warn("cannot raise the open-file limit; busy workspaces may run out", "error", err)
	}
	if o.noEditChecks {
		log.Warn("edit checks are off: writes based on stale reads are not refused (for benchmarks only)")
	}
	// A former daemon killed while it waited on its own mount may still
	// hold the store and its mounts: free them first.
	if err := gateway.RecoverStuck(ctx, log, dataDir); err != nil {
		return fmt.Errorf("recover from the former daemon: %w", err)
	}
	// The disk image goes under the workspaces and snapshots before
	// anything uses them.
	image, err := startDiskImage(log, diskImageOptions(dataDir, o.diskImage, o.diskImageSize, workspaces, snapshotsDir, o.loopControl), &cfg)
	if err != nil {
		return err
	}
	store, err := openStore(ctx, log, o, dataDir)
	if err != nil {
		return closeDiskImage(image, err)
	}
	cfg.DataDir, cfg.SocketPath, cfg.WorkspacesDir = dataDir, socket, workspaces
	cfg.Logger, cfg.Store = log, store
	if o.store == "badger" || o.store == "" {
		cfg.StoreFreeBytes = badger.MinFreeBytes + badger.BallastBytes
	}
	err = gateway.Run(ctx, cfg)
	if cerr := closeStore(store, storeCloseTimeout); cerr != nil && err == nil {
		err = cerr
	}
	return closeDiskImage(image, err)
}

// storeCloseTimeout bounds how long a stopping daemon waits for its store
// to close, within the unit's TimeoutStopSec (45 s, of which requests and
// jobs take up to 10 s each).
const storeCloseTimeout = 15 * time.Second

// closeStore closes store, but waits at most within: a store that cannot
// write its last files (Badger flushing into a data folder removed under
// it, or on a dead disk, retries forever) must not keep the daemon from
// exiting. What it holds is safe without the close: Badger replays its
// log at the next start, as after a crash, and etcd keeps everything.
// On a timeout the closing goroutine is left behind: the process exits.
func closeStore(store meta.Store, within time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("close metadata store: %w", err)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("close metadata store: not closed after %v; exiting without it (the next start recovers it)", within)
	}
}

// openStore opens the metadata store the flags choose: Badger in the data
// folder, or an etcd cluster that several servers share.
func openStore(ctx context.Context, log hclog.Logger, o serveOptions, dataDir string) (meta.Store, error) {
	eps, err := storeFlags(o)
	if err != nil {
		return nil, cli.Usagef("%v", err)
	}
	if o.store == "etcd" {
		log.Info("data folder", "data", dataDir, "etcd", eps, "prefix", o.etcdPrefix)
		store, err := etcd.Open(ctx, etcd.Config{Endpoints: eps, Prefix: o.etcdPrefix, Logger: log.Named("meta")})
		if err != nil {
			return nil, fmt.Errorf("open metadata store: %w", err)
		}
		return store, nil
	}
	metaDir := gateway.MetaDir(dataDir)
	log.Info("data folder", "data", dataDir, "meta", metaDir)
	store, err := badger.Open(ctx, metaDir, log.Named("meta"))
	if err != nil {
		return nil, fmt.Errorf("open metadata store: %w", err)
	}
	return store, nil
}

// storeFlags checks --store and --etcd-endpoints together and returns the
// endpoints.
func storeFlags(o serveOptions) ([]string, error) {
	var eps []string
	for _, ep := range strings.Split(o.etcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	switch o.store {
	case "badger", "":
		if o.etcdEndpoints != "" {
			return nil, errors.New("--etcd-endpoints needs --store etcd")
		}
		return nil, nil
	case "etcd":
		if len(eps) == 0 {
			return nil, errors.New("--store etcd needs --etcd-endpoints")
		}
		return eps, nil
	}
	return nil, fmt.Errorf("--store is badger or etcd, not %q", o.store)
}

// lookupGroup returns the gid of group, a name or a number.
func lookupGroup(group string) (int, error) {
	if gid, err := strconv.Atoi(group); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// neverIfZero turns a flag's 0 ("never") into the Config's negative
// never (0 there is the default).
func neverIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// badFlags is the usage error of every mistake in the flags: one line
// each.
func badFlags(errs []error) error {
	if len(errs) == 1 {
		return cli.Usagef("%v", errs[0])
	}
	lines := make([]string, len(errs))
	for i, err := range errs {
		lines[i] = "  " + err.Error()
	}
	return cli.Usagef("%d mistakes in the flags:\n%s", len(errs), strings.Join(lines, "\n"))
}

// eventLogFlag turns --event-log's 0 ("none") into the Config's negative
// none (0 there is the default).
func eventLogFlag(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// fuseTransport reads --fuse-transport, and says which transport the
// mounts get: uring needs the kernel to offer it, and auto takes it where
// it does.
func fuseTransport(log hclog.Logger, name string) (fs.Transport, error) {
	t, err := fs.ParseTransport(name)
	if err != nil {
		return "", cli.Usagef("--fuse-transport: %v", err)
	}
	if t == fs.TransportClassic {
		return t, nil
	}
	on, err := fs.URingEnabled()
	if err != nil {
		return "", err
	}
	switch {
	case on:
		log.Info("FUSE transport", "asked", t, "taken", fs.TransportURing)
	case t == fs.TransportURing:
		return "", fmt.Errorf("--fuse-transport uring: the kernel does not offer FUSE over io_uring; as root: echo Y > /sys/module/fuse/parameters/enable_uring (warren doctor checks it)")
	default:
		log.Info("FUSE transport", "asked", t, "taken", fs.TransportClassic, "why", "the fuse module's enable_uring is off")
	}
	return t, nil
}

// networks are the network flags, parsed.
type networks struct {
	allow   []string
	subnet  netip.Prefix
	private []netip.Prefix
	dns     []netip.AddrPort
}

// networkFlags parses the network flags, saying every mistake.
func networkFlags(o serveOptions) (networks, []error) {
	var n networks
	var bad []error
	// Unset (serve's own callers): every network, the gateway's default.
	if o.allowNetworks != "" {
		for _, m := range strings.Split(o.allowNetworks, ",") {
			m = strings.TrimSpace(m)
			if m != "none" && m != "egress" && m != "host" {
				bad = append(bad, fmt.Errorf("--allow-networks lists none, egress and host, not %q", m))
				continue
			}
			n.allow = append(n.allow, m)
		}
	}
	if o.egressSubnet != "" {
		p, err := netip.ParsePrefix(o.egressSubnet)
		if err != nil || !p.Addr().Is4() || p.Bits() < 16 || p.Bits() > 24 || !p.Addr().IsPrivate() {
			bad = append(bad, fmt.Errorf("--egress-subnet is a private IPv4 range of /16 to /24, not %q", o.egressSubnet))
		}
		n.subnet = p
	}
	for _, s := range o.egressPrivate {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				bad = append(bad, fmt.Errorf("--egress-allow-private is a CIDR, not %q", s))
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		n.private = append(n.private, p.Masked())
	}
	for _, s := range o.egressDNS {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				bad = append(bad, fmt.Errorf("--egress-dns is an IP or IP:port, not %q", s))
				continue
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		n.dns = append(n.dns, ap)
	}
	return n, bad
}

// splitList splits a comma-separated flag, dropping empty parts; "" is
// nil.
func splitList(v string) []string {
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
