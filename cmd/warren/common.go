package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"warren/api"
	"warren/internal/cli"
)

// threadFlags are the flags that name a thread and the socket.
type threadFlags struct {
	socket, tenant, thread string
	threadGiven            bool // --thread was on the command line, maybe empty
}

// clientFlags adds --socket to fs.
func clientFlags(e *cli.Env, fs *flag.FlagSet, socket *string) {
	def := e.Getenv("WARREN_SOCKET")
	if def == "" {
		def = api.DefaultSocket(cli.DefaultDataDir(e.Getenv))
	}
	fs.StringVar(socket, "socket", def, "gateway socket (default from WARREN_SOCKET, else the default data folder's)")
}

// addThreadFlags adds --socket, --tenant and --thread to fs.
func addThreadFlags(e *cli.Env, fs *flag.FlagSet, tf *threadFlags) {
	clientFlags(e, fs, &tf.socket)
	fs.StringVar(&tf.tenant, "tenant", "", "tenant id (default \"default\")")
	fs.Func("thread", "thread id (required)", func(s string) error {
		tf.thread, tf.threadGiven = s, true
		return nil
	})
}

// check reports a missing or empty --thread as a usage error.
func (tf *threadFlags) check() error {
	switch {
	case !tf.threadGiven:
		return cli.Usagef("--thread is required")
	case tf.thread == "":
		return cli.Usagef("--thread is empty: a thread id has at least one character")
	}
	return nil
}

// parseThreadOnly parses the args of a verb that takes flags and no
// arguments and names a thread (bind, close, delete).
func parseThreadOnly(fs *flag.FlagSet, tf *threadFlags, args []string) error {
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	return tf.check()
}

// callError words the error of a call to the gateway for a person. The
// gateway's own answers already name the thread and the step; other
// errors (the socket) get what was being done and a hint.
func callError(socket, doing string, err error) error {
	var apiErr *api.APIError
	switch {
	case errors.As(err, &apiErr):
		return err
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: no gateway answers on %s (is 'warren serve' running? set --socket or WARREN_SOCKET): %w", doing, socket, err)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: no permission to use the gateway socket %s: %w", doing, socket, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// showID prints an id for a terminal: as it is if it is plain, else
// quoted, so that control characters or escape sequences in a client's id
// can neither garble the output nor drive the terminal.
func showID(id string) string {
	if id == "" {
		return `""`
	}
	for _, r := range id {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == '\\' {
			return strconv.Quote(id)
		}
	}
	return id
}

// showThread names a thread in messages.
func showThread(tenant, thread string) string {
	if tenant == "" {
		tenant = api.DefaultTenant
	}
	return showID(tenant) + "/" + showID(thread)
}

// absDir makes a client's folder argument absolute: the gateway runs
// elsewhere and needs a full path.
func absDir(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", cli.Usagef("DIR is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", dir, err)
	}
	return abs, nil
}
