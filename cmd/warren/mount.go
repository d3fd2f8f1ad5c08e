package main

import (
	"context"
	"fmt"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

func mountCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren mount", "--thread ID [--tenant T] [--rw] DIR")
	addThreadFlags(e, fs, &tf)
	rw := fs.Bool("rw", false, "allow writes (the mount is read-only otherwise)")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("want exactly one DIR, got %d arguments", len(rest))
	}
	if err := tf.check(); err != nil {
		return err
	}
	dir, err := absDir(rest[0])
	if err != nil {
		return err
	}
	return mount(ctx, e, client.New(tf.socket), tf, dir, *rw)
}

// mount asks the gateway to serve a thread's workspace at dir, and prints
// where it is.
func mount(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags, dir string, writable bool) error {
	mi, err := c.Mount(ctx, api.MountRequest{Tenant: tf.tenant, Thread: tf.thread, Path: dir, Writable: writable})
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("mount %s at %s", showThread(tf.tenant, tf.thread), dir), err)
	}
	mode := "read-only"
	if mi.Writable {
		mode = "read-write"
	}
	_, err = fmt.Fprintf(e.Stdout, "%s (%s)\n", mi.Path, mode)
	return err
}
