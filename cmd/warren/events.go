package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"warren/client"
	"warren/internal/cli"
)

func eventsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var (
		socket string
		q      client.EventsQuery
		since  sinceFlag
	)
	fs := cli.NewFlags(e, "warren events", "[--tenant T] [--thread ID] [--prefix P] [--since SEQ]")
	clientFlags(e, fs, &socket)
	fs.StringVar(&q.Tenant, "tenant", "", "only this tenant's events (with --thread: default \"default\")")
	fs.StringVar(&q.Thread, "thread", "", "only this thread's events")
	fs.StringVar(&q.Prefix, "prefix", "", "only the file events of paths under this one")
	fs.Var(&since, "since", "first replay the kept events after this seq (an event's \"seq\"), then follow")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	q.Since = since.seq
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return events(ctx, e, client.New(socket), socket, q)
}

// sinceFlag is --since: unset, or an event's seq.
type sinceFlag struct{ seq *uint64 }

func (f *sinceFlag) String() string {
	if f.seq == nil {
		return ""
	}
	return strconv.FormatUint(*f.seq, 10)
}

func (f *sinceFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not an event's seq (a whole number, 0 or more)", s)
	}
	f.seq = &n
	return nil
}

// events prints the gateway's events, one JSON object per line, until ctx
// is done (the user interrupted it: not an error) or the stream ends. The
// lines are the gateway's own: JSON escapes control characters, so hostile
// ids cannot drive the terminal. They are written out as soon as no other
// has arrived behind them, so a burst is one write, and no line waits.
func events(ctx context.Context, e *cli.Env, c *client.Client, socket string, q client.EventsQuery) error {
	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	err := c.EventLines(ctx, q, func(line []byte, more bool) error {
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
