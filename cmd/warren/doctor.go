package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
	"warren/internal/diskimage"
	"warren/internal/doctor"
)

// doctorCmd checks this host before warren serve starts on it.
func doctorCmd(ctx context.Context, e *cli.Env, args []string) error {
	var o doctor.Options
	var socket, networks, subnet string
	fs := cli.NewFlags(e, "warren doctor", "[--data DIR] [--workspaces DIR] [--disk-image auto|on|off] [--socket-group GROUP] [--allow-networks LIST] [--egress-subnet CIDR] [--socket PATH]")
	fs.StringVar(&o.DataDir, "data", cli.DefaultDataDir(e.Getenv), "the data folder warren serve will use")
	fs.StringVar(&o.DiskImage.Workspaces, "workspaces", "", "the --workspaces folder warren serve will use (default DATA/workspaces)")
	fs.StringVar(&o.DiskImage.Mode, "disk-image", diskimage.ModeAuto, "the --disk-image warren serve will use")
	o.DiskImage.LoopControl = e.Getenv(diskimage.LoopControlEnv)
	fs.StringVar(&o.SocketGroup, "socket-group", "", "the group warren serve --socket-group will give the socket")
	fs.StringVar(&networks, "allow-networks", "none,egress,host", "the --allow-networks warren serve will use (without egress, the egress checks have nothing to check)")
	fs.StringVar(&subnet, "egress-subnet", "", "the --egress-subnet warren serve will use, for the fixes to name (default: the running daemon's)")
	clientFlags(e, fs, &socket)
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	o.Networks = strings.Split(networks, ",")
	if subnet != "" {
		if o.EgressSubnet, err = netip.ParsePrefix(subnet); err != nil {
			return cli.Usagef("--egress-subnet is a CIDR, not %q", subnet)
		}
	}
	h := doctor.System()
	// The headroom row: what the daemon serving here, if one does, has
	// left of its limits of new threads (its /readyz admission check).
	h.Ready = func() (api.Readiness, error) {
		c := client.New(socket)
		defer c.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(ctx, doctorReadyTimeout)
		defer cancel()
		return c.Ready(ctx)
	}
	return printDoctor(e, doctor.Run(h, o))
}

// doctorReadyTimeout bounds the daemon's answer to the doctor's readiness
// question: a daemon that takes longer is reported, not waited for.
const doctorReadyTimeout = 5 * time.Second

// printDoctor prints the results as a table, each fix under its check,
// and fails if any check failed.
func printDoctor(e *cli.Env, rs []doctor.Result) error {
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tFOUND")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.Status, r.Detail)
		if r.Status != doctor.OK && r.Fix != "" {
			fmt.Fprintf(tw, "\t\t  fix: %s\n", r.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if doctor.Failed(rs) {
		return fmt.Errorf("this host is not ready for warren serve: fix what failed above")
	}
	return nil
}
