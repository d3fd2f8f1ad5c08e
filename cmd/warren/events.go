package main

import (
	"bufio"
	"context"
	"os"
	"os/signal"
	"syscall"

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
// is done (the user interrupted it: not an error) or the stream ends. The
// lines are the gateway's own: JSON escapes control characters, so hostile
// ids cannot drive the terminal. They are written out as soon as no other
// has arrived behind them, so a burst is one write, and no line waits.
func events(ctx context.Context, e *cli.Env, c *client.Client, socket, tenant, thread string) error {
	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	err := c.EventLines(ctx, client.EventsQuery{Tenant: tenant, Thread: thread}, func(line []byte, more bool) error {
		if _, err := out.Write(line); err != nil {
			return err
		}
		if more {
			return nil
		}
		return out.Flush()
	})
	if ctx.Err() != nil {
		out.Flush()
		return nil
	}
	return callError(socket, "follow events", err)
}
