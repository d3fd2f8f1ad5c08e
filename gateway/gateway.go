package gateway

import (
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

	"warren/fs"
	"warren/gateway/lease"
	"warren/jail"
	"warren/meta"
)

// shutdownGrace bounds how long Close waits for requests in flight before
// it unmounts everything anyway.
const shutdownGrace = 10 * time.Second

// Gateway is a running daemon. Start makes one; call Close when finished.
type Gateway struct {
	// Set by Start, never changed.
	cfg     Config
	log     hclog.Logger
	store   meta.Store
	mounter mounter
	wsBase  string // Config.WorkspacesDir: backing roots
	wsReal  string // wsBase with symlinks resolved, to refuse inspection mounts in it
	mntBase string // DataDir/mnt: mount points
	sealOff bool   // mount points cannot be made immutable here (mountpoint_linux.go)
	dataDir string // DataDir with symlinks resolved, to refuse inspection mounts in it
	uid     uint32 // this process's uid, always allowed on the socket
	allow   map[uint32]bool
	srv     *http.Server
	ln      net.Listener
	// hub joins every mount this gateway serves, so a change made through
	// one mount shows at once through the others of the same folder.
	hub *fs.Hub

	// dataID and wsID are the identities of dataDir and wsReal: an
	// inspection folder is checked on descriptors, not by its path.
	dataID, wsID fileID
	// events fans the gateway's events out to GET /v1/events (events.go).
	events *broker
	// jails are the threads' sandboxes, made at their first command
	// (exec.go); guarded by mu.
	jails map[meta.ThreadKey]*threadJail
	// execs are the running commands by id, for their input and size;
	// execSeq numbers them. Guarded by mu.
	execs   map[string]*runningExec
	execSeq uint64
	// jobs are the background jobs this gateway runs or ran, by thread
	// (jobs.go); guarded by mu. jobWG counts those not ended yet.
	jobs  map[meta.ThreadKey]*threadJobs
	jobWG sync.WaitGroup
	// instance names this run of the gateway in the job records, and
	// machine the machine it runs on.
	instance string
	machine  string
	// lease is this gateway's hold on its host id, nil without one
	// (hosts.go, package lease). It owns its heartbeat and fence
	// goroutines; endLease ends them.
	lease *lease.Session

	threadLocks keyedLocks[meta.ThreadKey]

	// quotas holds the workspaces' quota groups (diskquota.go).
	quotas diskQuotas

	serveDone chan struct{} // closed when the serve goroutine returned
	serveErr  error         // written before serveDone is closed
	closeOnce sync.Once
	closeErr  error

	mu sync.Mutex
	// closed is set by Close; no mount is added after it.
	closed bool
	// threads holds the mounted threads, and the last mount error of bound
	// threads that are not mounted.
	threads map[meta.ThreadKey]*threadMount
	// inspections holds the inspection mounts by path, including ones being
	// made (mount nil, pending true) and ones that failed at start.
	inspections map[string]*inspectionMount
}

// threadMount is the in-memory state of one bound thread.
type threadMount struct {
	mount io.Closer // nil when not mounted
	err   error     // why the last mount attempt failed, when mount is nil
}

// inspectionMount is the in-memory state of one inspection mount.
type inspectionMount struct {
	key     meta.ThreadKey
	mount   io.Closer // nil while pending, or when mounting failed at start
	pending bool      // reserved by a request that is mounting it now
	err     error
}

// Start prepares the data folder, mounts again every thread and inspection
// mount that the store says was served, and starts serving the API. ctx
// bounds the start only; stop the gateway with Close. A binding that cannot
// be mounted again is logged and marked, and does not stop the start.
func Start(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g := &Gateway{
		cfg:         cfg,
		log:         cfg.Logger,
		store:       cfg.Store,
		mounter:     cfg.mounter,
		wsBase:      cfg.WorkspacesDir,
		mntBase:     filepath.Join(cfg.DataDir, "mnt"),
		uid:         uint32(os.Getuid()),
		allow:       make(map[uint32]bool),
		serveDone:   make(chan struct{}),
		threads:     make(map[meta.ThreadKey]*threadMount),
		inspections: make(map[string]*inspectionMount),
		events:      newBroker(eventBuffer),
		jails:       make(map[meta.ThreadKey]*threadJail),
		execs:       make(map[string]*runningExec),
		jobs:        make(map[meta.ThreadKey]*threadJobs),
		instance:    newInstance(),
		machine:     machineID(),
		hub:         fs.NewHub(fs.HubConfig{Logger: cfg.Logger.Named("fs"), NoEditChecks: cfg.NoEditChecks}),
	}
	for _, u := range cfg.AllowUIDs {
		g.allow[u] = true
	}
	if err := g.makeLayout(); err != nil {
		g.hub.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.probeSeal()
	if err := g.startQuotas(); err != nil {
		g.hub.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	if err := g.startLease(ctx); err != nil {
		g.hub.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	// A gateway killed with SIGKILL leaves its jails' cgroups behind.
	if err := jail.RemoveStaleCgroups(); err != nil {
		g.log.Warn("remove cgroups of ended jails", "error", err)
	}
	g.restore(ctx)

	ln, err := listenSocket(cfg.SocketPath)
	if err != nil {
		g.endLease()
		g.unmountAll()
		g.hub.Close()
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	g.ln = ln
	g.srv = &http.Server{
		Handler:           g.handler(),
		MaxHeaderBytes:    64 << 10,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// "OPTIONS *" would be answered outside the route table.
		DisableGeneralOptionsHandler: true,
		ConnContext:                  g.connContext,
		ErrorLog:                     g.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	go func() {
		defer close(g.serveDone)
		err := g.srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			g.serveErr = fmt.Errorf("serve api: %w", err)
		}
	}()
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
// serves the same threads. It does not close the Store. Calling it again
// returns the first call's result.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		// Commands end with their jails, and their streams with them.
		// Jobs end too, and their ends are recorded (before the caller
		// closes the store) and told. Event streams never go idle by
		// themselves: end them next, so that Shutdown does not wait its
		// whole grace for them.
		g.noteStoppingAll("the daemon stopped")
		g.closeJails()
		g.jobWG.Wait()
		g.events.close()

		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := g.srv.Shutdown(ctx)
		if err != nil {
			// Handlers still running see g.closed and undo what they
			// mount from now on; cut their connections.
			g.log.Warn("requests still running at shutdown", "error", err)
			err = g.srv.Close()
		}
		<-g.serveDone
		// The listener does not unlink the socket (see listenSocket).
		if rmErr := os.Remove(g.cfg.SocketPath); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			g.log.Warn("remove socket", "socket", g.cfg.SocketPath, "error", rmErr)
		}
		g.endLease() // no fence behind unmountAll, nor on a closed store
		g.closeErr = errors.Join(g.serveErr, err, g.unmountAll())
		g.hub.Close()
		g.log.Info("gateway stopped", "socket", g.cfg.SocketPath)
	})
	return g.closeErr
}

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
	if g.dataID, err = statID(g.dataDir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if g.wsID, err = statID(g.wsReal); err != nil {
		return fmt.Errorf("workspaces folder: %w", err)
	}
	return nil
}

// unmountAll unmounts every thread and inspection mount, keeping records.
// It is called once g.closed is set (or before serving started), so no
// mount is added behind it.
func (g *Gateway) unmountAll() error {
	g.mu.Lock()
	var closers []io.Closer
	var names []string
	for k, t := range g.threads {
		if t.mount != nil {
			closers = append(closers, t.mount)
			names = append(names, g.workspacePath(k))
		}
	}
	clear(g.threads)
	for p, im := range g.inspections {
		if im.mount != nil {
			closers = append(closers, im.mount)
			names = append(names, p)
		}
		if !im.pending {
			delete(g.inspections, p)
		}
	}
	g.mu.Unlock()

	var errs []error
	for i, c := range closers {
		if err := c.Close(); err != nil {
			g.log.Error("unmount at shutdown", "path", names[i], "error", err)
			errs = append(errs, fmt.Errorf("unmount %s: %w", names[i], err))
		}
	}
	return errors.Join(errs...)
}

// workspacePath names a thread for logs when its paths are not at hand.
func (g *Gateway) workspacePath(k meta.ThreadKey) string {
	p, err := WorkspaceRoot(g.mntBase, k.Tenant, k.Thread)
	if err != nil {
		return fmt.Sprintf("%q/%q", k.Tenant, k.Thread)
	}
	return p
}
