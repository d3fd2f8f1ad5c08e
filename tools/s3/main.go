// Command s3 is the S3-compatible server that warren's tests run:
// SeaweedFS's weed command (`weed server -s3`: a master, a volume server,
// a filer and the S3 gateway in one process), built from this module so
// the server and its many dependencies stay out of warren's go.mod.
// internal/testenv builds it on demand (S3Server).
//
// weed's own main is package main, which cannot be imported; this one
// runs weed's commands (weed/command) as weed/weed.go does, without two
// things of that main's that tests have no use for: Sentry's error
// reporting, and the web assets that the status pages embed.
//
// Why SeaweedFS, and what was measured here (2 cores): its module, served
// only as a pseudo-version, builds with CGO_ENABLED=0 in 7m35s from an
// empty build cache, 2m29s with warren's own dependencies already in it,
// into a 163 MB binary. versitygw v1.8.0 (an S3 gateway over a folder),
// the other candidate, builds in 1m03s from an empty cache (45 MB); it
// was not needed, SeaweedFS building within the 10 minutes allowed.
package main

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/seaweedfs/seaweedfs/weed/command"
	weed_server "github.com/seaweedfs/seaweedfs/weed/server"
	"github.com/seaweedfs/seaweedfs/weed/util"
	flag "github.com/seaweedfs/seaweedfs/weed/util/fla9"
	util_http "github.com/seaweedfs/seaweedfs/weed/util/http"
)

func main() {
	weed_server.StaticFS = emptyFS{}
	flag.Var(&util.ConfigurationFileDirectory, "config_dir", "directory with toml configuration files")
	flag.Parse()
	args := flag.Args()
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: s3 command [arguments]")
		os.Exit(2)
	}
	for _, cmd := range command.Commands {
		if cmd.Name() != args[0] || cmd.Run == nil {
			continue
		}
		if args[0] != command.GetFuseCommandName() {
			util_http.InitGlobalHttpClient()
		}
		cmd.Flag.Usage = func() { cmd.Usage() }
		cmd.Flag.Parse(args[1:])
		if !cmd.Run(cmd, cmd.Flag.Args()) {
			cmd.Flag.Usage()
			os.Exit(1)
		}
		os.Exit(command.CommandExitStatus())
	}
	fmt.Fprintf(os.Stderr, "s3: unknown subcommand %q\n", args[0])
	os.Exit(2)
}

// emptyFS stands in for weed's embedded web assets (favicon, the status
// pages' scripts), which live in weed's main package and cannot be
// imported; tests use none of them.
type emptyFS struct{}

func (emptyFS) Open(name string) (fs.File, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}
