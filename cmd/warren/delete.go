package main

import (
	"context"
	"fmt"

	"warren/client"
	"warren/internal/cli"
)

func deleteCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren delete", "--thread ID [--tenant T]")
	addThreadFlags(e, fs, &tf)
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	return deleteThread(ctx, e, client.New(tf.socket), tf)
}

// deleteThread unmounts a thread and removes its folder and its record.
func deleteThread(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags) error {
	pctx, endBar := withProgressBar(ctx, e)
	err := c.DeleteThread(pctx, tf.tenant, tf.thread)
	endBar()
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("delete %s", showThread(tf.tenant, tf.thread)), err)
	}
	_, err = fmt.Fprintf(e.Stdout, "deleted %s\n", showThread(tf.tenant, tf.thread))
	return err
}
