package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"warren/client"
	"warren/internal/cli"
)

// The verbs of several servers: hosts and unpin.

func hostsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var socket string
	fs := cli.NewFlags(e, "warren hosts", "[--json]")
	clientFlags(e, fs, &socket)
	asJSON := fs.Bool("json", false, "print the hosts as JSON")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	hosts, err := client.New(socket).Hosts(ctx)
	if err != nil {
		return callError(socket, "list hosts", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(hosts)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tLAST HEARTBEAT\tALIVE")
	for _, h := range hosts {
		alive := "no"
		if h.Alive {
			alive = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s (%s ago)\t%s\n", showID(h.ID), h.LastBeat.Local().Format(time.DateTime),
			time.Since(h.LastBeat).Round(time.Second), alive)
	}
	return tw.Flush()
}

func unpinCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren unpin", "--thread ID [--tenant T]")
	addThreadFlags(e, fs, &tf)
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	ti, err := client.New(tf.socket).Unpin(ctx, tf.tenant, tf.thread)
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("unpin %s", showThread(tf.tenant, tf.thread)), err)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s moved to the host %s (%s)\n", showThread(tf.tenant, tf.thread), orDash(ti.HostID), ti.MountPath)
	return err
}
