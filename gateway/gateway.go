package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/admit"
	"warren/gateway/call"
	"warren/gateway/checkpoints"
	"warren/gateway/events"
	"warren/gateway/files"
	"warren/gateway/health"
	"warren/gateway/hosts"
	"warren/gateway/idle"
	"warren/gateway/images"
	"warren/gateway/inspect"
	"warren/gateway/jails"
	"warren/gateway/jobs"
	"warren/gateway/metrics"
	"warren/gateway/network"
	"warren/gateway/ports"
	"warren/gateway/quota"
	"warren/gateway/replicas"
	"warren/gateway/threadlimit"
	"warren/gateway/threads"
	"warren/image"
	"warren/jail"
	"warren/meta"
)

// shutdownGrace bounds how long Close waits for requests in flight before
// it unmounts everything anyway.
const shutdownGrace = 10 * time.Second

// Gateway is a running daemon. Start makes one; call Close when finished.
// It composes the rooms (see the package doc): it makes them in their
// order, wires them, serves their handlers, and stops them in the order
// Close says. It owns none of their state.
type Gateway struct {
	// Set by Start, never changed.
	cfg   Config
	log   hclog.Logger
	store meta.Store
	// pool serves the threads' mounts on shared connections; nil with
	// Config.FUSEPerThread or another mounter.
	pool    *fs.Pool
	wsBase  string // Config.WorkspacesDir: backing roots
	wsReal  string // wsBase with symlinks resolved, to refuse inspection mounts in it
	mntBase string // DataDir/mnt: mount points
	dataDir string // DataDir with symlinks resolved, to refuse inspection mounts in it
	uid     uint32 // this process's uid, always allowed on the socket
	allow   map[uint32]bool
	srv     *http.Server
	ln      net.Listener
	// hub joins every mount this gateway serves, so a change made through
	// one mount shows at once through the others of the same folder.
	hub *fs.Hub
	// metricsSrv serves the operational endpoints on Config.MetricsAddr,
	// if set, and metricsDone is closed when that server returned.
	metricsSrv  *http.Server
	metricsDone chan struct{}

	// The rooms, each owning its state, its lock and its goroutines; set
	// by Start, never changed.
	metrics     *metrics.Metrics         // the Prometheus series
	events      *events.Bus              // the event stream, its log, the file events
	quotas      *quota.Quotas            // the workspaces' quota groups
	threads     *threads.Threads         // bindings, locks, workspaces and mounts
	inspections *inspect.Inspections     // the inspection mounts
	fileAPI     *files.Files             // the file API
	checkpoints *checkpoints.Checkpoints // snapshots, undo, redo, revert, fork
	hosts       *hosts.Hosts             // the host's lease and the threads' pins
	jails       *jails.Jails             // the jails and the commands in them
	network     *network.Network         // the jails' networks
	images      *images.Images           // the jails' images
	jobs        *jobs.Jobs               // the background jobs and the exec streams
	ports       *ports.Ports             // the channels into the jails' ports
	idle        *idle.Reclaimer          // the idle reclaim's goroutine
	health      *health.Health           // readiness and usage
	replicas    *replicas.Replicas       // the checkpoints' copies in the snapshot store; nil without one

	// requests counts the API's requests being answered (Close waits).
	requests requestSet
	// admit bounds the connections, requests, bodies, uploads and
	// streams that clients hold at once (package admit): the listener
	// and the router ask it.
	admit *admit.Admitter

	serveDone chan struct{} // closed when the serve goroutine returned
	serveErr  error         // written before serveDone is closed
	closeOnce sync.Once
	closeErr  error
}

// Start prepares the data folder, detaches what a former run left
// mounted, mounts again every inspection mount that the store says was
// served, and starts serving the API; the threads the store says were
// served are mounted again in the background from then on (restore.go),
// and a call for one of them mounts it at once if the background has not
// yet. ctx bounds the start only; stop the gateway with Close. A binding
// that cannot be mounted again is logged and marked, and does not stop
// the start.
func Start(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// The admission of threads and the bound of jails, from the machine
	// where the config leaves them to it.
	machine, err := threadlimit.ReadMachine(cmp.Or(cfg.OSThreadLimit, DefaultOSThreadLimit))
	if err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	threadAdmit, err := threadlimit.New(cfg.threadLimits(machine))
	if err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	maxJails := cmp.Or(cfg.MaxJails, machine.MaxJails())
	m := metrics.New()
	g := &Gateway{
		cfg:       cfg,
		log:       cfg.Logger,
		store:     meta.Observed(cfg.Store, m.ObserveStore),
		metrics:   m,
		wsBase:    cfg.WorkspacesDir,
		mntBase:   filepath.Join(cfg.DataDir, "mnt"),
		uid:       uint32(os.Getuid()),
		allow:     make(map[uint32]bool),
		serveDone: make(chan struct{}),
		admit:     admit.New(cfg.Admission, fileLimit()),
		hub:       fs.NewHub(fs.HubConfig{Logger: cfg.Logger.Named("fs"), NoEditChecks: cfg.NoEditChecks, ObserveOp: m.FUSEObserver(cfg.NoFSMetrics)}),
	}
	mounter := cfg.mounter
	if _, ok := mounter.(threads.FUSEMounter); ok && !cfg.FUSEPerThread {
		pool, err := fs.NewPool(fs.PoolConfig{Hub: g.hub, Logger: cfg.Logger.Named("fs")})
		if err != nil {
			closeFS(g.hub, g.pool, g.log)
			return nil, fmt.Errorf("start gateway: %w", err)
		}
		g.pool, mounter = pool, threads.FUSEMounter{Pool: pool}
	}
	m.Watch(metricsFigures(g))
	for _, u := range cfg.AllowUIDs {
		g.allow[u] = true
	}
	if err := g.makeLayout(); err != nil {
		closeFS(g.hub, g.pool, g.log)
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// The snapshot store first: a daemon told to replicate its
	// checkpoints refuses to start without it, before it makes anything.
	if cfg.SnapshotStore != "" {
		if g.replicas, err = newReplicas(ctx, g); err != nil {
			closeFS(g.hub, g.pool, g.log)
			return nil, fmt.Errorf("start gateway: %w", err)
		}
	}

	// The rooms, each made over those it calls (package doc, Rooms).
	if g.events, err = events.New(events.Config{
		LogPath: filepath.Join(cfg.DataDir, "events.log"), LogSize: cfg.EventLog, Refusals: m, Logger: g.log,
	}); err != nil {
		closeFS(g.hub, g.pool, g.log)
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	if g.quotas, err = quota.Start(quota.Config{
		WorkspacesDir: g.wsBase, StoreDir: MetaDir(cfg.DataDir), StoreFreeBytes: cfg.StoreFreeBytes,
		QuotaBytes: cfg.DiskQuotaBytes, ReserveBytes: cfg.DiskReserveBytes, Logger: g.log,
	}); err != nil {
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// The jails' networks: with egress allowed, the daemon's egress
	// network and resolver, set up (a former run's leftovers removed)
	// before any jail starts.
	if g.network, err = network.Start(ctx, network.Config{
		Allow: cfg.AllowNetworks, DataDir: g.dataDir, Subnet: cfg.EgressSubnet, AllowPrivate: cfg.EgressAllowPrivate,
		Upstreams: cfg.EgressDNS, Events: g.events, Metrics: m, Logger: g.log,
	}); err != nil {
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// The image store, its leftovers of a pull cut short removed.
	if g.images, err = images.Start(ctx, images.Config{
		Store: image.Config{
			Dir: filepath.Join(cfg.DataDir, "images"), StoreBytes: imageStoreBytes(cfg),
			MaxImageBytes: cfg.ImageMaxBytes, MaxEntries: cfg.ImageMaxEntries,
			Registries: cfg.Registries, AuthFile: cfg.RegistryAuth,
		},
		Default: cfg.JailImage, Keep: cfg.ImageKeep, Bindings: g.store, Logger: g.log,
	}); err != nil {
		g.network.Close()
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.threads = threads.New(threads.Config{
		AllowNetworks: g.network.Modes(),
		Store:         g.store, Logger: g.log, HostID: cfg.HostID, OnUnreachable: cfg.OnUnreachable, SeedCommand: cfg.SeedCommand,
		DataDir: cfg.DataDir, WorkspacesDir: g.wsBase, MountsDir: g.mntBase,
		Mounter: mounter, Hub: g.hub, Transport: cfg.FUSETransport, Admit: threadAdmit,
		Quotas: g.quotas, Events: g.events, Metrics: m, MaxCheckpoints: checkpoints.Max, RemountGate: cfg.remountGate,
		Images: g.images,
	})
	if g.inspections, err = inspect.New(inspect.Config{
		Store: g.store, Logger: g.log, Threads: g.threads,
		DataDir: g.dataDir, WorkspacesDir: g.wsReal, UnmountDrain: cfg.unmountDrain,
	}); err != nil {
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.fileAPI = files.New(files.Config{
		Threads: g.threads, Hub: g.hub, Events: g.events, Changes: g.events.OnChange, Logger: g.log,
	})
	g.checkpoints = newCheckpoints(g)
	// The host's lease, before anything is served: a gateway that cannot
	// hold its host id serves nothing pinned.
	if g.hosts, err = hosts.Start(ctx, hosts.Config{
		HostID: cfg.HostID, RenewEvery: cfg.RenewEvery, ExpiresAfter: cfg.ExpiresAfter,
		Fence: g.threads.Fence, Store: g.store, Logger: g.log,
	}); err != nil {
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.jails = jails.New(jails.Config{
		Binary: cfg.JailBinary, Rlimits: cfg.JailRlimits, Network: cfg.JailNetwork, MemoryBytes: cfg.JailMemoryBytes,
		MaxProcs: cfg.JailMaxProcs, CPUMillis: cfg.JailCPUMillis, Path: cfg.JailPath, Idle: cfg.JailIdle, Max: maxJails, CheckRun: files.ValidRun,
		Hub: g.hub, Threads: g.threads, Hosts: g.hosts, Networks: g.network, Images: g.images, Events: g.events, Metrics: m, Logger: cfg.Logger,
	})
	g.jobs = jobs.New(jobs.Config{
		HostID: cfg.HostID, Machine: hosts.MachineID(), MaxJobs: cfg.MaxJobs, Store: g.store, Jails: g.jails,
		Threads: g.threads, Events: g.events, Metrics: m, Lookups: g.network, Logger: cfg.Logger,
	})
	g.jails.SetJobs(g.jobs)
	g.ports = ports.New(ports.Config{Jails: g.jails, Logger: cfg.Logger})
	g.jails.AddEnded(g.ports)
	g.jails.AddEnded(g.network)
	g.threads.Attach(threads.Deps{Hosts: g.hosts, Jails: g.jails, Jobs: g.jobs, Inspections: g.inspections, History: g.checkpoints, Ports: g.ports})
	g.health = health.New(health.Config{
		Store: g.store, HostID: cfg.HostID, DataDir: cfg.DataDir, WorkspacesDir: g.wsBase,
		Threads: g.threads, Jails: g.jails, Jobs: g.jobs, Hosts: g.hosts, Quotas: g.quotas, Checkpoints: g.checkpoints,
		Images: g.images, Replicas: healthReplicas(g),
	})

	// A gateway killed with SIGKILL leaves its jails' cgroups behind.
	if err := jail.RemoveStaleCgroups(); err != nil {
		g.log.Warn("remove cgroups of ended jails", "error", err)
	}
	g.jails.StartBase(g.dataDir, g.wsReal, cfg.SnapshotsDir)
	h := threadAdmit.Headroom()
	g.log.Info("limits", "max_threads", h.MaxThreads, "max_threads_per_tenant", h.MaxThreadsPerTenant,
		"fd_reserve", h.FDReserve, "memory_cap_mib", h.MemoryCap>>20, "os_thread_limit", h.OSThreadLimit,
		"os_thread_reserve", h.OSThreadReserve, "max_jails", maxJails)
	// What the store says this host served, before the API serves: the
	// threads' part (the mounts themselves in the background), then the
	// inspection mounts.
	if n, err := g.threads.Restore(ctx); err == nil {
		mounted, failed, err := g.inspections.Restore(ctx)
		if err != nil {
			g.log.Error("restore: list inspection mounts", "error", err)
		} else {
			g.log.Info("restore: serving; the threads are served again in the background", "threads", n, "inspection_mounts", mounted, "inspection_failed", failed)
		}
	}

	ln, err := listenSocket(cfg.SocketPath, cfg.SocketGID)
	if err != nil {
		g.jails.CloseBase()
		g.threads.EndRestore()
		g.hosts.Close()
		g.replicas.Close() // before the repositories it reads close
		g.checkpoints.Close()
		g.unmountAll()
		g.network.Close()
		g.images.Close()
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.ln = ln
	if err := g.startMetricsListener(); err != nil {
		ln.Close()
		os.Remove(cfg.SocketPath)
		g.jails.CloseBase()
		g.threads.EndRestore()
		g.hosts.Close()
		g.replicas.Close() // before the repositories it reads close
		g.checkpoints.Close()
		g.unmountAll()
		g.network.Close()
		g.images.Close()
		closeFS(g.hub, g.pool, g.log)
		g.events.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// The checkpoints left to copy to the snapshot store, and its
	// uploader, once the threads and checkpoints are there.
	if g.replicas != nil {
		g.replicas.Run(ctx)
	}
	g.srv = &http.Server{
		Handler:           g.tracked(g.handler()),
		MaxHeaderBytes:    64 << 10,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// "OPTIONS *" would be answered outside the route table.
		DisableGeneralOptionsHandler: true,
		ConnContext:                  call.ConnContext,
		ErrorLog:                     g.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	g.idle = idle.Start(idle.Config{
		Threads: g.threads, Jails: g.jails, Jobs: g.jobs, Store: g.store, CloseIdle: cfg.CloseIdle, Logger: g.log,
	})
	go func() {
		defer close(g.serveDone)
		err := g.srv.Serve(g.admit.Listener(ln, call.PeerUID, func(uid uint32, err error) {
			g.metrics.APIError(api.CodeUnavailable)
			g.log.Warn("refused: connection", "peer_uid", uid, "status", http.StatusServiceUnavailable, "code", api.CodeUnavailable, "error", err)
		}))
		if !errors.Is(err, http.ErrServerClosed) {
			g.serveErr = fmt.Errorf("serve api: %w", err)
		}
	}()
	g.threads.StartRestore()
	g.log.Info("gateway serving", "socket", cfg.SocketPath, "data", cfg.DataDir,
		"workspaces", g.wsBase, "mounts", g.mntBase, "host_id", cfg.HostID)
	return g, nil
}

// Run starts a gateway and serves until ctx is done or serving fails, then
// closes it.
func Run(ctx context.Context, cfg Config) error {
	g, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-g.Done():
	}
	return g.Close()
}

// SocketPath returns where the API listens.
func (g *Gateway) SocketPath() string { return g.cfg.SocketPath }

// Done is closed when the API stopped serving, by Close or by a failure
// (see Close's error).
func (g *Gateway) Done() <-chan struct{} { return g.serveDone }

// Close stops accepting connections, waits a while for requests in flight,
// unmounts every mount and keeps every record, so that the next Start
// serves the same threads. It returns only once nothing of the gateway
// runs (no goroutine, request, job, jail or mount; see the package's
// Goroutines), so the caller may close the Store then. Calling it again
// returns the first call's result.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		// From now on no mount, jail or job is added: a request still
		// running is refused (ErrClosed) where it would add one, and
		// undoes what it made.
		// The reclaimer first: it closes threads and jails. The
		// background restore takes no more threads (the one it does
		// ends below).
		g.idle.Close()
		g.threads.StopRestore()
		g.threads.Close()
		g.inspections.Close()
		g.jobs.Close()
		// Commands end with their jails, and their streams with them.
		// Jobs end too, and their ends are recorded (before the caller
		// closes the store) and told; spawns under way end or are
		// refused. Event streams never go idle by themselves: end them
		// next, so that Shutdown does not wait its whole grace for them.
		g.jobs.NoteStoppingAll("the daemon stopped")
		g.jails.CloseAll()
		// Their channels closed with them; none opens from now on.
		g.ports.Close()
		g.jobs.Wait()
		// The jails are gone: their links and rules go, then the
		// daemon's table and resolver.
		if err := g.network.Close(); err != nil {
			g.log.Warn("take the jails' network away", "error", err)
		}
		if err := g.images.Close(); err != nil {
			g.log.Warn("close the image store", "error", err)
		}
		g.events.Close()
		if err := g.events.LogError(); err != nil {
			g.log.Warn("the event log failed: a reader that comes back may not be given what it missed", "error", err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := g.srv.Shutdown(ctx)
		// Restores ignore their callers' ends (restoreContext); past the
		// grace, the stop ends them, their journals left for the next
		// start.
		g.checkpoints.EndRestores()
		// A thread's restore under way ends now (its checkpoint restore,
		// if any, with the others'); what it mounted, unmountAll
		// unmounts.
		g.threads.EndRestore()
		if err != nil {
			// Handlers still running are refused where they would add
			// a mount, a jail or a job, and undo what they made; cut
			// their connections (requests waits for them below).
			g.log.Warn("requests still running at shutdown", "error", err)
			err = g.srv.Close()
		}
		<-g.serveDone
		g.stopMetricsListener()
		// Shutdown waited for the requests, but Close does not: the
		// handlers of cut connections may still run.
		g.requests.closeAndWait()
		g.jails.CloseBase() // no jail starts any more
		// The listener does not unlink the socket (see listenSocket).
		if rmErr := os.Remove(g.cfg.SocketPath); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			g.log.Warn("remove socket", "socket", g.cfg.SocketPath, "error", rmErr)
		}
		g.hosts.Close()    // no fence behind unmountAll, nor on a closed store
		g.replicas.Close() // before the repositories it reads close
		g.checkpoints.Close()
		g.closeErr = errors.Join(g.serveErr, err, g.unmountAll())
		closeFS(g.hub, g.pool, g.log)
		g.log.Info("gateway stopped", "socket", g.cfg.SocketPath)
	})
	return g.closeErr
}

// closeFS lets the shared FUSE connections go, once the mounts were
// closed, and then the hub. A mount still busy (detached lazily) keeps
// its connection a while: poolCloseWait bounds the wait for it.
func closeFS(hub *fs.Hub, pool *fs.Pool, log hclog.Logger) {
	if pool != nil {
		if err := pool.Close(poolCloseWait); err != nil {
			log.Warn("shared FUSE connections still in use at stop", "error", err)
		}
	}
	hub.Close()
}

// poolCloseWait bounds how long a stop waits for the shared FUSE
// connections to end.
const poolCloseWait = 5 * time.Second

// makeLayout creates the data folder and its subfolders.
func (g *Gateway) makeLayout() error {
	for _, d := range []struct {
		path string
		perm os.FileMode
	}{
		{g.cfg.DataDir, 0o755},
		// Only the daemon reaches the backing folders: a host user who could
		// plant a link there would walk around the mount's boundary checks.
		{g.wsBase, 0o700},
		// Mount paths are for the daemon's own user and its group (the
		// same as the socket's): another local user must not browse every
		// tenant's workspace by walking mnt/.
		{g.mntBase, 0o750},
		// The checkpoints' content: the daemon's alone, as the
		// workspaces are.
		{g.cfg.SnapshotsDir, 0o700},
	} {
		if err := os.MkdirAll(d.path, d.perm); err != nil {
			return fmt.Errorf("create %s: %w", d.path, err)
		}
		// MkdirAll leaves an existing folder as it is, and the umask may
		// have narrowed a new one.
		if err := os.Chmod(d.path, d.perm); err != nil {
			return fmt.Errorf("set mode of %s: %w", d.path, err)
		}
	}
	real, err := filepath.EvalSymlinks(g.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("resolve data dir: %w", err)
	}
	g.dataDir = real
	if g.wsReal, err = filepath.EvalSymlinks(g.wsBase); err != nil {
		return fmt.Errorf("resolve workspaces folder: %w", err)
	}
	return nil
}

// unmountAll unmounts every thread and inspection mount, keeping records.
// No mount is added or put back after it (threadSet.drain,
// inspect.Inspections.Drain).
func (g *Gateway) unmountAll() error {
	var closers []io.Closer
	var names []string
	for k, m := range g.threads.Drain() {
		closers = append(closers, m)
		names = append(names, g.threads.Name(k))
	}
	for p, m := range g.inspections.Drain() {
		closers = append(closers, m)
		names = append(names, p)
	}

	// A few at a time: each unmount waits for its server to stop, and
	// ten thousand of them one by one would outlast any stop timeout.
	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, unmountParallel)
		mu   sync.Mutex
		errs []error
	)
	for i, c := range closers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.Close(); err != nil {
				g.log.Error("unmount at shutdown", "path", names[i], "error", err)
				mu.Lock()
				errs = append(errs, fmt.Errorf("unmount %s: %w", names[i], err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// unmountParallel bounds the unmounts made at once at shutdown.
const unmountParallel = 32

// requestSet counts the API's requests being answered, so that Close
// returns only once none runs: http.Server.Close, unlike Shutdown, does
// not wait for them.
type requestSet struct {
	mu sync.Mutex
	// closed is set by closeAndWait: a request that comes after it is
	// answered 503 at once.
	closed bool
	// wg counts the requests being answered; Add runs only under mu while
	// closed is not set, so no Add follows the Wait.
	wg sync.WaitGroup
}

// tracked counts the requests h answers in g.requests; one that comes
// after Close waited for them is refused.
func (g *Gateway) tracked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.requests.enter() {
			g.writeError(w, r, call.Params{}, fmt.Errorf("answer %s: %w", call.Clip(r.URL.EscapedPath()), api.ErrClosed))
			return
		}
		defer g.requests.wg.Done()
		h.ServeHTTP(w, r)
	})
}

// enter counts a request, unless closeAndWait ran: then it says false.
func (rs *requestSet) enter() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return false
	}
	rs.wg.Add(1)
	return true
}

// closeAndWait refuses requests from now on and waits for those being
// answered.
func (rs *requestSet) closeAndWait() {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.wg.Wait()
}
