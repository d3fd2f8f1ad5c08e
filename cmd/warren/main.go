// Command warren is the client of the warren daemon: every verb but serve
// talks to its socket through package client. `warren serve` runs the
// daemon, which is the separate program warrend (cmd/warrend): this one
// links none of it, so that a client call starts fast. Each verb lives in
// its own file: it parses its flags and calls an unexported function that
// the tests call too.
//
// Exit status: 0 on success, 1 when the call failed, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"warren/internal/cli"
)

// verb is one subcommand.
type verb struct {
	summary string
	run     func(ctx context.Context, e *cli.Env, args []string) error
}

// verbs is the table of subcommands.
func verbs() map[string]verb {
	return map[string]verb{
		"serve":   {"run the daemon (warrend, found beside this program or on PATH)", serveCmd},
		"version": {"print this client's version, and the daemon's when one answers", versionCmd},
		"doctor":  {"check this host before serve: kernel features, cgroups, limits, disk; says what to fix", doctorCmd},
		"bind":    {"bind a thread and print its mount path", bindCmd},
		"network": {"change a thread's egress rules (--allow, --deny, --egress-default); a running jail follows them at once", networkCmd},
		"ls":      {"list bound threads (--usage: what each uses)", lsCmd},
		"usage":   {"print what a thread uses: CPU, memory, processes, disk against its quota, jobs, FUSE requests", usageCmd},
		"close":   {"unmount a thread, keep its folder", closeCmd},
		"delete":  {"unmount a thread and remove its folder and record", deleteCmd},
		"mount":   {"mount a thread's workspace at DIR for inspection", mountCmd},
		"umount":  {"take down an inspection mount", umountCmd},
		"events":  {"print the gateway's events as JSON lines until interrupted", eventsCmd},
		"exec":    {"run a command in a thread's jail; exits with its exit code", execCmd},
		"spawn":   {"start a background job in a thread's jail and print its id", spawnCmd},
		"jobs":    {"list a thread's background jobs", jobsCmd},
		"logs":    {"print a job's output (-f: follow it until the job ends)", logsCmd},
		"kill":    {"stop a job's whole process tree (SIGTERM, then SIGKILL), or send it one signal", killCmd},
		"hosts":   {"list the servers that share the metadata store, and whether they are alive", hostsCmd},
		"unpin":   {"move a thread whose host died to this server now", unpinCmd},
		"image":   {"manage the server's images: pull REF, ls, rm REF, load FILE (the jails' roots, by bind --image)", imageCmd},
		"port":    {"open a channel to a port of a thread's jail and print its URL (--json: with its token; --close PORT)", portCmd},

		"checkpoint":  {"take a checkpoint of a thread's workspace", checkpointCmd},
		"checkpoints": {"list a thread's checkpoints", checkpointsCmd},
		"diff":        {"list (--text: show) what changed between checkpoints, or since one", diffCmd},
		"undo":        {"restore the checkpoint before the workspace's state", undoCmd},
		"redo":        {"restore the checkpoint the last undo left", redoCmd},
		"revert":      {"restore a given checkpoint", revertCmd},
		"fork":        {"make a new thread whose workspace starts at a checkpoint", forkCmd},
	}
}

func main() {
	e := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(run(context.Background(), e, os.Args[1:]))
}

// run runs one warren command line and returns its exit status.
func run(ctx context.Context, e *cli.Env, args []string) int {
	vs := verbs()
	args, err := hoistGlobalFlags(args)
	if err != nil {
		fmt.Fprintf(e.Stderr, "warren: %v\n", err)
		printUsage(e.Stderr, vs)
		return 2
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(e.Stderr, vs)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	v, ok := vs[args[0]]
	if !ok {
		fmt.Fprintf(e.Stderr, "warren: unknown command %q\n", args[0])
		printUsage(e.Stderr, vs)
		return 2
	}
	err = v.run(ctx, e, args[1:])
	// A command's own exit code (exec, logs) is passed on as it is.
	var ec *exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	return cli.Status(e, "warren "+args[0], err)
}

// globalFlags are the flags that may also come before the command, as
// docker's and kubectl's do (`warren --socket S ls`). Every command that
// talks to a daemon defines them, so they are moved behind the command
// name, where its own flag set parses them (and a command without one
// says so).
var globalFlags = map[string]bool{"socket": true, "tenant": true}

// hoistGlobalFlags moves the global flags that come before the command
// behind it.
func hoistGlobalFlags(args []string) ([]string, error) {
	var globals []string
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && args[0] != "-h" && args[0] != "--help" {
		name, _, withValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if !globalFlags[name] {
			return nil, fmt.Errorf("%s is not a flag that may come before the command (those are --socket and --tenant); put it after the command", args[0])
		}
		n := 2
		if withValue {
			n = 1
		} else if len(args) < 2 {
			return nil, fmt.Errorf("%s needs a value", args[0])
		}
		globals = append(globals, args[:n]...)
		args = args[n:]
	}
	if len(globals) == 0 {
		return args, nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no command after %s", strings.Join(globals, " "))
	}
	return append(append([]string{args[0]}, globals...), args[1:]...), nil
}

func printUsage(w io.Writer, vs map[string]verb) {
	names := make([]string, 0, len(vs))
	for n := range vs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: warren [--socket PATH] [--tenant ID] <command> [flags] [args]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-11s %s\n", n, vs[n].summary)
	}
	b.WriteString("\nRun 'warren <command> -h' for the flags of a command.\n")
	io.WriteString(w, b.String())
}
