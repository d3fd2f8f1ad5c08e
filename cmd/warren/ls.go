package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

func lsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var socket, tenant string
	var pg page
	fs := cli.NewFlags(e, "warren ls", "[--tenant T] [--limit N] [--cursor C] [--usage] [--json]")
	clientFlags(e, fs, &socket)
	fs.StringVar(&tenant, "tenant", "", "list only this tenant's threads")
	fs.IntVar(&pg.limit, "limit", 0, fmt.Sprintf("print one page of at most N threads (1 to %d) and the cursor of the next; without it, every thread", api.ThreadsPageMax))
	fs.StringVar(&pg.cursor, "cursor", "", "print the page that starts at this cursor (printed by the page before)")
	asJSON := fs.Bool("json", false, "print the bindings as JSON")
	usage := fs.Bool("usage", false, "print what each thread uses here (CPU, memory, processes, disk, jobs, FUSE requests) instead")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("unexpected arguments %q", rest)
	}
	var only *string
	limitSet, cursorSet := false, false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tenant":
			only = &tenant
		case "limit":
			limitSet, pg.one = true, true
		case "cursor":
			cursorSet, pg.one = true, true
		}
	})
	if limitSet && (pg.limit < 1 || pg.limit > api.ThreadsPageMax) {
		return cli.Usagef("--limit must be from 1 to %d", api.ThreadsPageMax)
	}
	if cursorSet && pg.cursor == "" {
		return cli.Usagef("--cursor is empty: pass the cursor the page before printed")
	}
	if *usage {
		return lsUsage(ctx, e, client.New(socket), socket, only, pg, *asJSON)
	}
	return ls(ctx, e, client.New(socket), socket, only, pg, *asJSON)
}

// page is which threads ls lists: every one (one false), or the one page
// --limit and --cursor name (limit 0: the daemon's default size).
type page struct {
	one    bool
	limit  int
	cursor string
}

// lsUsage prints the usage of each thread served here, of one tenant if
// tenant is not nil. A thread another host serves is left out.
func lsUsage(ctx context.Context, e *cli.Env, c *client.Client, socket string, tenant *string, pg page, asJSON bool) error {
	tis, err := listThreads(ctx, e, c, socket, tenant, pg)
	if err != nil {
		return err
	}
	us := []api.Usage{}
	for _, ti := range tis {
		if !ti.Mounted {
			continue
		}
		u, err := c.Usage(ctx, ti.Tenant, ti.Thread)
		if err != nil {
			return callError(socket, "read the usage of "+ti.Thread, err)
		}
		us = append(us, u)
	}
	if asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(us)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	printUsageHeader(tw)
	for _, u := range us {
		printUsageRow(tw, u)
	}
	return tw.Flush()
}

// ls prints the bindings, of one tenant if tenant is not nil, as a table
// or as JSON.
func ls(ctx context.Context, e *cli.Env, c *client.Client, socket string, tenant *string, pg page, asJSON bool) error {
	tis, err := listThreads(ctx, e, c, socket, tenant, pg)
	if err != nil {
		return err
	}
	if asJSON {
		if tis == nil {
			tis = []api.ThreadInfo{}
		}
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(tis)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	// HOST is the host that served the thread last; PINNED the one that
	// holds it now, if a live one does.
	fmt.Fprintln(tw, "TENANT\tTHREAD\tSTATE\tHOST\tPINNED\tMOUNT")
	for _, ti := range tis {
		state := string(ti.State)
		if ti.State == "bound" && !ti.Mounted {
			state = "bound (not mounted here)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", showID(ti.Tenant), showID(ti.Thread), state,
			orDash(ti.HostID), orDash(ti.Owner), ti.MountPath)
	}
	return tw.Flush()
}

// listThreads lists the bindings, of one tenant if tenant is not nil:
// every one, or the one page pg names. After a page that others follow it
// tells, on stderr (stdout keeps the shape it has without paging), how to
// list the next.
func listThreads(ctx context.Context, e *cli.Env, c *client.Client, socket string, tenant *string, pg page) ([]api.ThreadInfo, error) {
	if !pg.one {
		var tis []api.ThreadInfo
		var err error
		if tenant != nil {
			tis, err = c.TenantThreads(ctx, *tenant)
		} else {
			tis, err = c.Threads(ctx)
		}
		if err != nil {
			return nil, callError(socket, "list threads", err)
		}
		return tis, nil
	}
	resp, err := c.ThreadsPage(ctx, tenant, pg.limit, pg.cursor)
	if err != nil {
		return nil, callError(socket, "list threads", err)
	}
	if resp.NextCursor != "" {
		fmt.Fprintf(e.Stderr, "more threads follow; list them with --cursor %s\n", resp.NextCursor)
	}
	return resp.Bindings, nil
}
