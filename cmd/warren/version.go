package main

import (
	"context"
	"fmt"
	"time"

	"warren/client"
	"warren/internal/cli"
	"warren/internal/version"
)

// versionAsk bounds the wait for the daemon's version: the command answers
// for the client whether or not a daemon does.
const versionAsk = 3 * time.Second

func versionCmd(ctx context.Context, e *cli.Env, args []string) error {
	var socket string
	fs := cli.NewFlags(e, "warren version", "[--socket PATH]")
	clientFlags(e, fs, &socket)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	version.Print(e.Stdout, "warren", version.Get())
	ctx, cancel := context.WithTimeout(ctx, versionAsk)
	defer cancel()
	c := client.New(socket)
	defer c.CloseIdleConnections()
	v, err := c.Version(ctx)
	if err != nil {
		// Not a failure: the client's own version is what was asked
		// first; the daemon's comes when one answers.
		fmt.Fprintf(e.Stdout, "daemon: none answers on %s (%v)\n", socket, err)
		return nil
	}
	version.Print(e.Stdout, "daemon: warrend", v)
	return nil
}
