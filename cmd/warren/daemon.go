package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"warren/internal/cli"
)

// daemonName is the daemon's binary. The client CLI does not link the
// daemon (FUSE, the jail, the store backends): Go runs the init of every
// package a binary links, so a CLI with the daemon inside starts several
// times slower, and every client call would pay for it.
const daemonName = "warrend"

// serveCmd runs the daemon: it replaces this process with warrend, same
// pid and same arguments, so `warren serve` keeps working and whoever
// started it (a shell, systemd, a test) holds the daemon itself.
func serveCmd(_ context.Context, _ *cli.Env, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program, to find %s beside it: %w", daemonName, err)
	}
	return execDaemon(self, args, os.Environ())
}

// execDaemon execs the warrend that daemonPath finds for self with
// "serve" and args. It returns only on failure.
func execDaemon(self string, args, environ []string) error {
	path, err := daemonPath(self, exec.LookPath)
	if err != nil {
		return err
	}
	argv := append([]string{path, "serve"}, args...)
	if err := syscall.Exec(path, argv, environ); err != nil {
		return fmt.Errorf("run the daemon %s: %w", path, err)
	}
	return nil // not reached
}

// daemonPath finds warrend: beside self (the binary that was run, so bin/warren
// runs bin/warrend of the same build), else on PATH.
func daemonPath(self string, lookPath func(string) (string, error)) (string, error) {
	beside := filepath.Join(filepath.Dir(self), daemonName)
	fi, err := os.Stat(beside)
	switch {
	case err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0:
		return beside, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("look for the daemon at %s: %w", beside, err)
	}
	if p, err := lookPath(daemonName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the daemon is the program %s, and there is none beside %s nor on PATH: build it (make build puts both in bin/) or run it yourself", daemonName, self)
}
