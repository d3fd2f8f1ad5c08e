package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// usageCmd prints what one thread uses.
func usageCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren usage", "[--json] --thread ID")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the usage as JSON")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	if err := tf.check(); err != nil {
		return err
	}
	u, err := client.New(tf.socket).Usage(ctx, tf.tenant, tf.thread)
	if err != nil {
		return callError(tf.socket, "read the thread's usage", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(u)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	printUsageHeader(tw)
	printUsageRow(tw, u)
	if err := tw.Flush(); err != nil {
		return err
	}
	if u.Image != "" {
		fmt.Fprintf(e.Stdout, "image %s (%s, on disk once for every thread on it)\n", u.Image, showBytes(u.ImageBytes))
	}
	_, err = fmt.Fprintf(e.Stdout, "image store: %s\n", showBytes(u.ImageStoreBytes))
	return err
}

// printUsageHeader and printUsageRow print usage columns, for usage and
// ls --usage alike.
func printUsageHeader(w io.Writer) {
	fmt.Fprintln(w, "TENANT\tTHREAD\tCPU\tMEMORY\tPEAK\tPROCS\tDISK\tFILES\tHOME\tQUOTA\tSNAPSHOTS\tSNAP QUOTA\tJOBS\tFUSE OPS")
}

func printUsageRow(w io.Writer, u api.Usage) {
	cpu, mem, peak, procs := "-", "-", "-", "-"
	if u.Jail {
		cpu = fmt.Sprintf("%.2fs", u.CPUSeconds)
		mem, peak = showBytes(u.MemoryBytes), showBytes(u.MemoryPeakBytes)
		procs = fmt.Sprint(u.Processes)
	}
	quota := "-"
	if u.DiskQuotaBytes > 0 {
		quota = showBytes(u.DiskQuotaBytes)
	}
	snapQuota := "-"
	if u.SnapshotQuotaBytes > 0 {
		snapQuota = showBytes(u.SnapshotQuotaBytes)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d/%d\t%d\n", showID(u.Tenant), showID(u.Thread), cpu, mem, peak, procs,
		showBytes(u.DiskBytes), u.DiskFiles, showBytes(u.HomeBytes), quota, showBytes(u.SnapshotBytes), snapQuota, u.JobsRunning, u.Jobs, u.FUSERequests)
}

// showBytes prints a size in the largest binary unit it fills.
func showBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}
