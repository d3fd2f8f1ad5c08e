package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
	"warren/meta"
)

func bindCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren bind", "--thread ID [--tenant T] [--image REF] [--network none|egress|host] [--allow RULE]... [--deny RULE]... [--egress-default allow|deny] [--egress-rate BYTES] [--max-connections N] [--memory BYTES] [--procs N] [--cpu CPUS] [--max-jobs N] [--disk BYTES] [--snapshot-quota BYTES] [--checkpoints N] [--env K=V]... [--json]")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the binding record as JSON")
	s := meta.Settings{Env: map[string]string{}}
	fs.StringVar(&s.Image, "image", "", "the OCI image whose filesystem is the jail's root (node:22, registry:5000/team/py:3.12, name@sha256:...); pulled at the bind if the server lacks it")
	fs.StringVar(&s.Network, "network", "", "the jail's network: none (its own loopback only), egress (NATed out under the thread's rules) or host")
	var eg meta.Egress
	addEgressFlags(fs, &eg)
	fs.Int64Var(&s.EgressBytesPerSecond, "egress-rate", 0, "bytes per second an egress jail sends and receives, each way (default no bound)")
	fs.IntVar(&s.MaxConnections, "max-connections", 0, "open connections of an egress jail (default 1024)")
	fs.Int64Var(&s.MemoryBytes, "memory", 0, "memory of the thread's jail, in bytes")
	fs.IntVar(&s.MaxProcs, "procs", 0, "processes of the thread's jail")
	fs.Var((*cli.CPU)(&s.CPUMillis), "cpu", "CPU time of the thread's jail: CPUs (0.5, 2) or thousandths of a CPU (500m)")
	fs.IntVar(&s.MaxJobs, "max-jobs", 0, "background jobs that run at once")
	fs.Int64Var(&s.DiskBytes, "disk", 0, "disk quota of the thread's workspace, in bytes")
	fs.IntVar(&s.Checkpoints, "checkpoints", 0, "how many checkpoints the thread keeps")
	fs.Int64Var(&s.SnapshotBytes, "snapshot-quota", 0, "bytes the thread's kept checkpoints may reference (default the server's, or the disk quota)")
	fs.Var(envList(s.Env), "env", "variable K=V for every command of the thread (repeatable)")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	// Any settings flag gives the thread these settings, all of them:
	// flags left out go back to the gateway's defaults.
	var settings *meta.Settings
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "image", "network", "memory", "procs", "cpu", "max-jobs", "env", "disk", "checkpoints", "snapshot-quota",
			"allow", "deny", "egress-default", "egress-rate", "max-connections":
			settings = &s
		}
	})
	if eg.Default != "" || eg.Allow != nil || eg.Deny != nil {
		s.Egress = &eg
	}
	ctx, end := withProgressBar(ctx, e)
	defer end()
	return bind(ctx, e, client.New(tf.socket), tf, settings, *asJSON)
}

// bind binds a thread, with settings unless they are nil, and prints its
// mount path, or its record as JSON.
func bind(ctx context.Context, e *cli.Env, c *client.Client, tf threadFlags, settings *meta.Settings, asJSON bool) error {
	var br api.BindResponse
	var err error
	if settings != nil {
		br, err = c.BindWith(ctx, tf.tenant, tf.thread, *settings)
	} else {
		br, err = c.Bind(ctx, tf.tenant, tf.thread)
	}
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("bind %s", showThread(tf.tenant, tf.thread)), err)
	}
	if asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(br.Binding)
	}
	_, err = fmt.Fprintln(e.Stdout, br.MountPath)
	return err
}
