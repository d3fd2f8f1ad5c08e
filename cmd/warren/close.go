package main

import (
	"context"
	"fmt"

	"warren/client"
	"warren/internal/cli"
)

func closeCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren close", "--thread ID [--tenant T]")
	addThreadFlags(e, fs, &tf)
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	return closeThread(ctx, e, client.New(tf.socket), tf)
}

// closeThread unmounts a thread, keeping its folder and its record.
func closeThread(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags) error {
	if _, err := c.CloseThread(ctx, tf.tenant, tf.thread); err != nil {
		return callError(tf.socket, fmt.Sprintf("close %s", showThread(tf.tenant, tf.thread)), err)
	}
	_, err := fmt.Fprintf(e.Stdout, "closed %s\n", showThread(tf.tenant, tf.thread))
	return err
}
