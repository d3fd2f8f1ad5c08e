package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// The verbs of checkpoints: checkpoint, checkpoints, diff, undo, redo,
// revert, fork.

func checkpointCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	var req api.CheckpointRequest
	fs := cli.NewFlags(e, "warren checkpoint", "--thread ID [--tenant T] [--label L] [--turn N] [--run R]")
	addThreadFlags(e, fs, &tf)
	fs.StringVar(&req.Label, "label", "", "what the checkpoint is, for a person")
	fs.IntVar(&req.Turn, "turn", 0, "the turn it precedes or ends")
	fs.StringVar(&req.Run, "run", "", "the agent run it belongs to")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	pctx, endBar := withProgressBar(ctx, e)
	out, err := client.New(tf.socket).History().Checkpoint(pctx, tf.tenant, tf.thread, req)
	endBar()
	if err != nil {
		return callError(tf.socket, "take a checkpoint of "+showThread(tf.tenant, tf.thread), err)
	}
	how := "changes only"
	if out.Cost.Full {
		how = "whole workspace"
	}
	_, err = fmt.Fprintf(e.Stdout, "%s (%d files, %d bytes; read %d, %s, %.1f ms)\n", out.Checkpoint.ID,
		out.Checkpoint.Files, out.Checkpoint.Bytes, out.Cost.Read, how, out.Cost.Millis)
	return err
}

func checkpointsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren checkpoints", "--thread ID [--tenant T] [--json]")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the history as JSON")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	out, err := client.New(tf.socket).History().Checkpoints(ctx, tf.tenant, tf.thread)
	if err != nil {
		return callError(tf.socket, "list the checkpoints of "+showThread(tf.tenant, tf.thread), err)
	}
	if *asJSON {
		return printJSON(e.Stdout, out)
	}
	redo := make(map[string]bool)
	for _, id := range out.Redo {
		redo[id] = true
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tAT\tFILES\tBYTES\tOWN\tREPLICATED\tCREATED\tLABEL")
	for _, c := range out.Checkpoints {
		at := ""
		switch {
		case c.Head:
			at = "head"
		case redo[c.ID]:
			at = "redo"
		}
		label := c.Label
		if c.Auto {
			label = "(auto) " + label
		}
		own := "-" // a record from before snapshot quotas, not counted yet
		if c.Counted {
			own = fmt.Sprint(c.OwnBytes)
		}
		// The server says whether it has a store (replicating): without
		// one, "no" would read as "not yet".
		replicated := "-"
		switch {
		case c.Replicated:
			replicated = "yes"
		case out.Replicating:
			replicated = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", c.ID, orDash(at), c.Files, c.Bytes, own, replicated,
			c.CreatedAt.Local().Format(time.DateTime), showID(label))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f := out.FailedRestore; f != nil {
		// The reason is the daemon's text, paths in it too: quoted
		// unless plain.
		_, err = fmt.Fprintf(e.Stdout, "last failed restore: %s to %s at %s, put back: %s\n",
			showID(f.Op), showID(f.To), f.EndedAt.Local().Format(time.DateTime), strconv.Quote(f.Reason))
	}
	return err
}

func diffCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren diff", "--thread ID [--tenant T] [--from CP] [--to CP|now] [--text] [--json]")
	addThreadFlags(e, fs, &tf)
	from := fs.String("from", "", "the checkpoint to compare from (default the head)")
	to := fs.String("to", "now", "the checkpoint to compare to, or now")
	text := fs.Bool("text", false, "print unified diffs of the text files")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	out, err := client.New(tf.socket).History().Diff(ctx, tf.tenant, tf.thread, *from, *to, *text)
	if err != nil {
		return callError(tf.socket, "diff "+showThread(tf.tenant, tf.thread), err)
	}
	if *asJSON {
		return printJSON(e.Stdout, out)
	}
	var b strings.Builder
	for _, p := range out.Added {
		fmt.Fprintf(&b, "A %s\n", showID(p))
	}
	for _, p := range out.Removed {
		fmt.Fprintf(&b, "D %s\n", showID(p))
	}
	for _, p := range out.Modified {
		fmt.Fprintf(&b, "M %s\n", showID(p))
	}
	for _, d := range out.Diffs {
		b.WriteString(d.Diff)
		if !strings.HasSuffix(d.Diff, "\n") {
			b.WriteString("\n")
		}
	}
	_, err = io.WriteString(e.Stdout, b.String())
	return err
}

func undoCmd(ctx context.Context, e *cli.Env, args []string) error {
	return restoreCmd(ctx, e, "undo", args)
}

func redoCmd(ctx context.Context, e *cli.Env, args []string) error {
	return restoreCmd(ctx, e, "redo", args)
}

func revertCmd(ctx context.Context, e *cli.Env, args []string) error {
	return restoreCmd(ctx, e, "revert", args)
}

// restoreCmd runs undo, redo or revert.
func restoreCmd(ctx context.Context, e *cli.Env, op string, args []string) error {
	var tf threadFlags
	usage := "--thread ID [--tenant T] [--force]"
	if op == "revert" {
		usage = "--thread ID [--tenant T] [--force] CHECKPOINT"
	}
	fs := cli.NewFlags(e, "warren "+op, usage)
	addThreadFlags(e, fs, &tf)
	force := fs.Bool("force", false, "stop the thread's running commands and jobs first")
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	var id string
	switch {
	case op == "revert" && len(rest) == 1:
		id = rest[0]
	case op == "revert":
		return cli.Usagef("give one CHECKPOINT")
	case len(rest) > 0:
		return cli.Usagef("unexpected arguments %q", rest)
	}
	if err := tf.check(); err != nil {
		return err
	}
	c := client.New(tf.socket)
	var out api.RestoreResponse
	pctx, endBar := withProgressBar(ctx, e)
	switch op {
	case "undo":
		out, err = c.History().Undo(pctx, tf.tenant, tf.thread, *force)
	case "redo":
		out, err = c.History().Redo(pctx, tf.tenant, tf.thread, *force)
	default:
		out, err = c.History().Revert(pctx, tf.tenant, tf.thread, id, *force)
	}
	endBar()
	if err != nil {
		return callError(tf.socket, op+" "+showThread(tf.tenant, tf.thread), err)
	}
	var b strings.Builder
	if out.Saved != "" {
		fmt.Fprintf(&b, "saved the changes in %s\n", out.Saved)
	}
	for _, s := range out.Stopped {
		fmt.Fprintf(&b, "stopped %s\n", s)
	}
	fmt.Fprintf(&b, "%s: at %s, %d paths changed\n", op, out.To, len(out.Changed))
	_, err = io.WriteString(e.Stdout, b.String())
	return err
}

func forkCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	var req api.ForkRequest
	fs := cli.NewFlags(e, "warren fork", "--thread ID [--tenant T] [--checkpoint CP] [--to NEW-THREAD]")
	addThreadFlags(e, fs, &tf)
	fs.StringVar(&req.Checkpoint, "checkpoint", "", "the checkpoint the new thread starts at (default the head)")
	fs.StringVar(&req.Thread, "to", "", "the new thread's id (default one made up)")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	pctx, endBar := withProgressBar(ctx, e)
	out, err := client.New(tf.socket).History().Fork(pctx, tf.tenant, tf.thread, req)
	endBar()
	if err != nil {
		return callError(tf.socket, "fork "+showThread(tf.tenant, tf.thread), err)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s\t%s\n", showID(out.Binding.Thread), out.MountPath)
	return err
}

// printJSON prints v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
