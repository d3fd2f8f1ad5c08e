package main

import (
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"syscall"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

func eventsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var socket, tenant, thread string
	fs := cli.NewFlags(e, "warren events", "[--tenant T] [--thread ID]")
	clientFlags(e, fs, &socket)
	fs.StringVar(&tenant, "tenant", "", "only this tenant's events (with --thread: default \"default\")")
	fs.StringVar(&thread, "thread", "", "only this thread's events")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return events(ctx, e, client.New(socket), socket, tenant, thread)
}

// events prints the gateway's events, one JSON object per line, until ctx
// is done (the user interrupted it: not an error) or the stream ends.
func events(ctx context.Context, e *cli.Env, c *client.Client, socket, tenant, thread string) error {
	enc := json.NewEncoder(e.Stdout)
	// JSON escapes control characters, so hostile ids cannot drive the
	// terminal; "<", ">" and "&" in paths stay as they are.
	enc.SetEscapeHTML(false)
	err := c.Events(ctx, tenant, thread, func(ev api.Event) error { return enc.Encode(ev) })
	if ctx.Err() != nil {
		return nil
	}
	return callError(socket, "follow events", err)
}
