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
// returns the arguments. Flag errors are a usage error, every one of them
// said at once, then the usage.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, errs := ParseAll(fs, args)
	if len(errs) == 0 {
		return pos, nil
	}
	if errors.Is(errs[0], flag.ErrHelp) {
		return nil, flag.ErrHelp
	}
	for _, err := range errs {
		fmt.Fprintln(fs.Output(), err)
	}
	fs.Usage()
	return nil, &UsageError{Msg: errors.Join(errs...).Error(), Shown: true}
}

// ParseAll is Parse that goes on past a bad flag, to the end of args,
// and returns every flag error instead of printing them: a command that
// checks its flags' values too can say all that is wrong in one go. A
// flag that failed keeps its default. With -h it prints the usage and
// returns flag.ErrHelp alone.
func ParseAll(fs *flag.FlagSet, args []string) ([]string, []error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() {
		fs.SetOutput(out)
		fs.Usage = usage
	}()
	var (
		pos  []string
		errs []error
	)
	for {
		err := fs.Parse(args)
		args = fs.Args()
		switch {
		case errors.Is(err, flag.ErrHelp):
			fs.SetOutput(out)
			usage()
			return nil, []error{flag.ErrHelp}
		case err != nil:
			// The flag package stopped after the bad flag: go on
			// with the rest.
			errs = append(errs, err)
			continue
		}
		if len(args) == 0 {
			return pos, errs
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
