// Command warrend is the warren daemon: it serves the threads' workspaces
// as FUSE mounts, runs their jails and jobs, keeps the metadata store and
// answers the API on its socket. `warren serve FLAGS` runs it too: the
// client CLI execs this program with the same arguments.
//
// It is a program of its own so that the client CLI (cmd/warren) links
// none of the daemon. This binary is also what package jail re-executes as
// a thread's jail init (/proc/self/exe), so main checks for that first.
//
// Usage: warrend [serve] [flags]; warrend -h lists the flags; warrend
// --version says what build it is and what its kernel offers.
//
// Exit status: 0 when it stopped on a signal, 1 when it failed, 2 on a
// usage error.
package main

import (
	"context"
	"os"

	"warren/gateway"
	"warren/internal/cli"
	"warren/internal/version"
	"warren/jail"
)

func main() {
	// Re-executed as a thread's jail init (package jail): that, and
	// nothing else.
	if jail.IsInit() {
		jail.RunInit()
	}
	e := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(run(context.Background(), e, os.Args[1:]))
}

// run runs the daemon with args and returns its exit status. A first
// argument "serve" is how `warren serve` calls it: the messages then name
// the command the user typed.
func run(ctx context.Context, e *cli.Env, args []string) int {
	name := "warrend"
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		version.Print(e.Stdout, "warrend", gateway.DaemonVersion())
		return 0
	}
	if len(args) > 0 && args[0] == "serve" {
		name, args = "warren serve", args[1:]
	}
	return cli.Status(e, name, serveCmd(ctx, e, name, args))
}
