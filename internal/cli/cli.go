// Package cli holds what warren's two commands share: the client CLI
// (cmd/warren) and the daemon (cmd/warrend). It is their flag handling,
// their exit statuses and the defaults both must agree on (the data
// folder). It imports only the standard library, so the client CLI stays
// light.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Env is what a command may touch of the outside world; tests fill it in.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// UsageError marks a mistake in how a command was called (exit status 2).
type UsageError struct {
	Msg   string
	Shown bool // already printed, with the usage
}

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// NewFlags returns a flag set named name ("warren bind") whose errors and
// help go to e.Stderr and come back as errors (never os.Exit).
func NewFlags(e *Env, name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.Stderr, "usage: %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args, letting flags and arguments come in any order
// ("warren mount DIR --thread t" and "warren mount --thread t DIR"), and
// returns the arguments. A flag error is a usage error.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			// The flag package has printed the error and the usage.
			return nil, &UsageError{Msg: err.Error(), Shown: true}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// Status returns the exit status for the error a command named name
// returned, and prints the error when the status is not 0: 0 on success
// and for -h, 2 on a usage error, 1 otherwise.
func Status(e *Env, name string, err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if !ue.Shown {
			fmt.Fprintf(e.Stderr, "%s: %v\n", name, err)
		}
		return 2
	default:
		fmt.Fprintf(e.Stderr, "%s: %v\n", name, err)
		return 1
	}
}

// DefaultDataDir is where warren keeps its data when --data is not given:
// /var/lib/warren for root, else the user's state folder. The client finds
// the daemon's socket in it.
func DefaultDataDir(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/warren"
	}
	if s := getenv("XDG_STATE_HOME"); s != "" && filepath.IsAbs(s) {
		return filepath.Join(s, "warren")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "warren")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "warren")
	}
	return filepath.Join(os.TempDir(), "warren-"+strconv.Itoa(os.Geteuid()))
}
