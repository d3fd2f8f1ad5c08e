package main

import (
	"context"
	"encoding/json"
	"fmt"

	"warren/gateway"
)

func bindCmd(ctx context.Context, e *cliEnv, args []string) error {
	var tf threadFlags
	fs := newFlags(e, "bind", "--thread ID [--tenant T] [--json]")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the binding record as JSON")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	return bind(ctx, e, gateway.NewClient(tf.socket), tf, *asJSON)
}

// bind binds a thread and prints its mount path, or its record as JSON.
func bind(ctx context.Context, e *cliEnv, c *gateway.Client, tf threadFlags, asJSON bool) error {
	br, err := c.Bind(ctx, tf.tenant, tf.thread)
	if err != nil {
		return callError(tf.socket, fmt.Sprintf("bind %s", showThread(tf.tenant, tf.thread)), err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(br.Binding)
	}
	_, err = fmt.Fprintln(e.stdout, br.MountPath)
	return err
}
