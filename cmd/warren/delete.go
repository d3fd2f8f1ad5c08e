package main

import (
	"context"
	"fmt"

	"warren/client"
)

func deleteCmd(ctx context.Context, e *cliEnv, args []string) error {
	var tf threadFlags
	fs := newFlags(e, "delete", "--thread ID [--tenant T]")
	addThreadFlags(e, fs, &tf)
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	return deleteThread(ctx, e, client.New(tf.socket), tf)
}

// deleteThread unmounts a thread and removes its folder and its record.
func deleteThread(ctx context.Context, e *cliEnv, c *client.Client, tf threadFlags) error {
	if err := c.DeleteThread(ctx, tf.tenant, tf.thread); err != nil {
		return callError(tf.socket, fmt.Sprintf("delete %s", showThread(tf.tenant, tf.thread)), err)
	}
	_, err := fmt.Fprintf(e.stdout, "deleted %s\n", showThread(tf.tenant, tf.thread))
	return err
}
