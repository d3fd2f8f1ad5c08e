package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// exitCodeError makes warren exit with a command's own exit code.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// envList is a repeatable --env K=V flag.
type envList map[string]string

func (l envList) String() string { return "" }

func (l envList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("not K=V: %q", v)
	}
	l[k] = val
	return nil
}

func execCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	req := api.ExecRequest{Env: map[string]string{}}
	var withStdin, tty bool
	fs := cli.NewFlags(e, "warren exec", "[--run R] [--cwd D] [--env K=V]... [--timeout S] [--stdin] [-t] --thread ID -- CMD [ARG...]")
	addThreadFlags(e, fs, &tf)
	fs.StringVar(&req.Run, "run", "", "the agent run the command acts as in the workspace")
	fs.StringVar(&req.Cwd, "cwd", "", "folder to run in, inside /workspace (default /workspace)")
	fs.Var(envList(req.Env), "env", "extra variable K=V (repeatable)")
	fs.Float64Var(&req.TimeoutSeconds, "timeout", 0, "seconds before the command's whole session is killed (exit 124; default 600)")
	fs.BoolVar(&withStdin, "stdin", false, "pass this program's standard input to the command")
	fs.BoolVar(&tty, "t", false, "run the command on a terminal, with this terminal's keys and size")
	command, err := parseCommand(fs, &tf, args)
	if err != nil {
		return err
	}
	req.Command = command
	if withStdin && !tty {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		req.Stdin = string(b)
	}
	c := client.New(tf.socket)
	var onID func(string)
	// Without a terminal, ^C or a SIGTERM ends this program as it would
	// any other (the shell sees the signal); the daemon, whose answer has
	// no reader then, kills the command's whole tree. No handler is set:
	// it would start the runtime's signal thread, a millisecond of every
	// call here.
	if tty {
		// A terminal in raw mode sends ^C to the command as a key; the
		// signals that still come end the call cleanly, so the terminal
		// is put back.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		// Keys go to the command as they are typed: ^C is the command's,
		// not this program's.
		req.Tty = true
		req.Rows, req.Cols = terminalSize(int(os.Stdout.Fd()))
		// The command's terminal is of this one's type.
		req.Term = e.Getenv("TERM")
		if restore, err := rawTerminal(int(os.Stdin.Fd())); err == nil {
			defer restore()
		}
		onID = func(id string) { relayTerminal(ctx, c, tf.tenant, tf.thread, id) }
	}
	end, err := c.ExecEnd(ctx, tf.tenant, tf.thread, req, onID, e.Stdout, e.Stderr)
	if err != nil {
		return callError(tf.socket, "run the command", err)
	}
	// Why it ended so (its timeout, the thread's memory or process
	// limit), after its output: a bare 137 says nothing.
	if end.Note != "" {
		fmt.Fprintf(e.Stderr, "warren: %s\n", end.Note)
	}
	if code := *end.Exit; code != 0 {
		return &exitCodeError{code: code}
	}
	return nil
}

// parseCommand parses the flags of a verb that runs a command (exec,
// spawn): the flags first, then the command as it is ("--" ends the
// flags). It returns the command's bash -c script.
func parseCommand(fs *flag.FlagSet, tf *threadFlags, args []string) (string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", err
		}
		return "", &cli.UsageError{Msg: err.Error(), Shown: true}
	}
	if err := tf.check(); err != nil {
		return "", err
	}
	if len(fs.Args()) == 0 {
		return "", cli.Usagef("no command given")
	}
	return shellCommand(fs.Args()), nil
}

// shellCommand is the bash -c script for argv: one argument is a script
// as it is ("warren exec -- 'make && make test'"); several are a command
// and its arguments, each quoted unless it is plain (so that "git status"
// stays plain words, which the jail starts without bash).
func shellCommand(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if !plainArg(a, i == 0) {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// plainArg says whether a needs no quoting for bash: letters, digits and
// _-./:,+@%= only (no = in a command's name, where it would assign).
func plainArg(a string, first bool) bool {
	if a == "" {
		return false
	}
	for _, c := range []byte(a) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_-./:,+@%", c) >= 0 || c == '=' && !first
		if !ok {
			return false
		}
	}
	return true
}
