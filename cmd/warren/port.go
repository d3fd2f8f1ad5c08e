package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"warren/client"
	"warren/internal/cli"
)

// portCmd opens the channel to a port of a thread's jail and prints its
// URL (--json: the whole channel, with its token and headers), or closes
// it (--close PORT).
func portCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren port", "--thread ID [--tenant T] [--json] PORT | --close PORT")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the whole channel (url, token, headers) as JSON")
	closePort := fs.String("close", "", "close the channel to `PORT` instead")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if err := tf.check(); err != nil {
		return err
	}
	c := client.New(tf.socket)
	if *closePort != "" {
		if len(rest) > 0 || *asJSON {
			return cli.Usagef("--close PORT takes no other argument, nor --json")
		}
		port, err := parsePortArg(*closePort)
		if err != nil {
			return err
		}
		return closePortChannel(ctx, e, c, tf, port)
	}
	if len(rest) != 1 {
		return cli.Usagef("give one PORT")
	}
	port, err := parsePortArg(rest[0])
	if err != nil {
		return err
	}
	return openPort(ctx, e, c, tf, port, *asJSON)
}

// parsePortArg reads a port: a number from 1 to 65535.
func parsePortArg(s string) (int, error) {
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, cli.Usagef("port %q is not a number from 1 to 65535", s)
	}
	return port, nil
}

// openPort opens the channel and prints its URL, or all of it as JSON.
func openPort(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags, port int, asJSON bool) error {
	ch, err := c.OpenPort(ctx, tf.tenant, tf.thread, port)
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("open port %d of %s", port, showThread(tf.tenant, tf.thread)), err)
	}
	if asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(ch)
	}
	_, err = fmt.Fprintln(e.Stdout, ch.URL)
	return err
}

// closePortChannel closes the channel and says whether one was open.
func closePortChannel(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags, port int) error {
	got, err := c.ClosePort(ctx, tf.tenant, tf.thread, port)
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("close port %d of %s", port, showThread(tf.tenant, tf.thread)), err)
	}
	msg := fmt.Sprintf("closed port %d of %s", port, showThread(tf.tenant, tf.thread))
	if !got.Closed {
		msg = fmt.Sprintf("no channel was open to port %d of %s", port, showThread(tf.tenant, tf.thread))
	}
	_, err = fmt.Fprintln(e.Stdout, msg)
	return err
}
