package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"warren/fs"
	"warren/gateway"
	"warren/meta"
)

// serveOptions are the flags of warren serve.
type serveOptions struct {
	dataDir   string
	socket    string
	hostID    string
	allowUIDs uidList
	logLevel  string
	logJSON   bool
	// noEditChecks switches off the refusal of stale writes; benchmarks
	// set it to measure what the checks cost.
	noEditChecks bool
	// The jails of the threads.
	jailNetwork string
	jailMemory  int64
	jailProcs   int
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

func serveCmd(ctx context.Context, e *cliEnv, args []string) error {
	var o serveOptions
	fs := newFlags(e, "serve", "[--data DIR] [--socket PATH] [--host-id ID] [--allow-uid N]... [--log-level L] [--log-json] [--no-edit-checks]")
	fs.StringVar(&o.dataDir, "data", defaultDataDir(e.getenv), "data folder: metadata, workspaces, mounts")
	fs.StringVar(&o.socket, "socket", "", "API socket (default DATA/warren.sock)")
	fs.StringVar(&o.hostID, "host-id", "", "stable id of this host; pins its threads to it (default: not pinned)")
	fs.Var(&o.allowUIDs, "allow-uid", "uid allowed on the socket besides root and the server's own (repeatable)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON lines")
	fs.BoolVar(&o.noEditChecks, "no-edit-checks", false, "for benchmarks only: do not refuse writes based on stale reads")
	fs.StringVar(&o.jailNetwork, "jail-network", "none", "network of the threads' jails: none (loopback only) or host")
	fs.Int64Var(&o.jailMemory, "jail-memory", 0, "memory of each thread's jail, in bytes (default 2 GiB)")
	fs.IntVar(&o.jailProcs, "jail-procs", 0, "processes of each thread's jail (default 1024)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		return usagef("unknown log level %q", o.logLevel)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "warren",
		Level:      level,
		Output:     e.stderr,
		JSONFormat: o.logJSON,
	})
	return serve(ctx, log, o)
}

// serve runs the gateway until ctx is done: it creates the data folder,
// opens the metadata store in it and serves the API.
func serve(ctx context.Context, log hclog.Logger, o serveOptions) error {
	if o.jailNetwork != "" && o.jailNetwork != "none" && o.jailNetwork != "host" {
		return usagef("--jail-network is none or host, not %q", o.jailNetwork)
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
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create data folder: %w", err)
	}
	// Each mount holds a descriptor per inode the kernel knows.
	if err := fs.RaiseFileLimit(); err != nil {
		log.Warn("cannot raise the open-file limit; busy workspaces may run out", "error", err)
	}
	if o.noEditChecks {
		log.Warn("edit checks are off: writes based on stale reads are not refused (for benchmarks only)")
	}
	metaDir := gateway.MetaDir(dataDir)
	log.Info("data folder", "data", dataDir, "meta", metaDir)
	store, err := meta.OpenBadger(ctx, metaDir, log.Named("meta"))
	if err != nil {
		return fmt.Errorf("open metadata store: %w", err)
	}
	err = gateway.Run(ctx, gateway.Config{
		DataDir:         dataDir,
		SocketPath:      socket,
		HostID:          o.hostID,
		AllowUIDs:       o.allowUIDs,
		Logger:          log,
		Store:           store,
		NoEditChecks:    o.noEditChecks,
		JailNetwork:     o.jailNetwork,
		JailMemoryBytes: o.jailMemory,
		JailMaxProcs:    o.jailProcs,
	})
	if cerr := store.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close metadata store: %w", cerr)
	}
	return err
}
