package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"warren/client"
	"warren/internal/cli"
	"warren/meta"
)

// addEgressFlags adds the flags of an egress policy to fs.
func addEgressFlags(fs *flag.FlagSet, eg *meta.Egress) {
	fs.Var((*cli.Strings)(&eg.Allow), "allow", "an egress rule the jail may reach: a CIDR, a host name or *.domain (repeatable)")
	fs.Var((*cli.Strings)(&eg.Deny), "deny", "an egress rule the jail may not reach; wins over --allow (repeatable)")
	fs.StringVar(&eg.Default, "egress-default", "", "what rules do not name: allow (the default) or deny")
}

// networkCmd changes a thread's egress rules alone, at once for a running
// jail.
func networkCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren network", "--thread ID [--tenant T] [--allow RULE]... [--deny RULE]... [--egress-default allow|deny] [--json]")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the binding record as JSON")
	var eg meta.Egress
	addEgressFlags(fs, &eg)
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	c := client.New(tf.socket)
	ti, err := c.SetNetwork(ctx, tf.tenant, tf.thread, eg)
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("network %s", showThread(tf.tenant, tf.thread)), err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(ti)
	}
	p := ti.Settings.Egress
	if p == nil {
		p = &meta.Egress{}
	}
	_, err = fmt.Fprintf(e.Stdout, "egress of %s: default %s, allow %s, deny %s\n", showThread(tf.tenant, tf.thread),
		cmp.Or(p.Default, "allow"), rules(p.Allow), rules(p.Deny))
	return err
}

func rules(rs []string) string {
	if len(rs) == 0 {
		return "-"
	}
	return strings.Join(rs, " ")
}
