package main

import (
	"context"
	"fmt"

	"warren/client"
	"warren/internal/cli"
)

func umountCmd(ctx context.Context, e *cli.Env, args []string) error {
	var socket string
	fs := cli.NewFlags(e, "warren umount", "DIR")
	clientFlags(e, fs, &socket)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return cli.Usagef("want exactly one DIR, got %d arguments", len(rest))
	}
	dir, err := absDir(rest[0])
	if err != nil {
		return err
	}
	return umount(ctx, client.New(socket), socket, dir)
}

// umount takes down the inspection mount at dir.
func umount(ctx context.Context, c *client.Client, socket, dir string) error {
	if err := c.Unmount(ctx, dir); err != nil {
		return callError(socket, fmt.Sprintf("unmount %s", dir), err)
	}
	return nil
}
