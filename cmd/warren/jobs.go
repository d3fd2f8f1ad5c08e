package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// The verbs of background jobs: spawn, jobs, logs, kill (the stop
// sequence, or one signal with --signal).

func spawnCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	req := api.SpawnRequest{Env: map[string]string{}}
	fs := cli.NewFlags(e, "warren spawn", "[--run R] [--cwd D] [--env K=V]... [--user U] [--label L] --thread ID -- CMD [ARG...]")
	addThreadFlags(e, fs, &tf)
	fs.StringVar(&req.Run, "run", "", "the agent run the job acts as in the workspace")
	fs.StringVar(&req.Cwd, "cwd", "", "folder to run in, inside /workspace (default /workspace)")
	fs.Var(envList(req.Env), "env", "extra variable K=V (repeatable)")
	fs.StringVar(&req.User, "user", "", "who starts the job (told again when it ends)")
	fs.StringVar(&req.Label, "label", "", "the job's name in lists and events (default the command)")
	command, err := parseCommand(fs, &tf, args)
	if err != nil {
		return err
	}
	req.Command = command
	job, err := client.New(tf.socket).Spawn(ctx, tf.tenant, tf.thread, req)
	if err != nil {
		return callError(tf.socket, "start the job", err)
	}
	_, err = fmt.Fprintln(e.Stdout, job.ID)
	return err
}

func jobsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren jobs", "--thread ID [--tenant T] [--json]")
	addThreadFlags(e, fs, &tf)
	asJSON := fs.Bool("json", false, "print the jobs as JSON")
	if err := parseThreadOnly(fs, &tf, args); err != nil {
		return err
	}
	jobs, err := client.New(tf.socket).Jobs(ctx, tf.tenant, tf.thread)
	if err != nil {
		return callError(tf.socket, "list jobs", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(jobs)
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tEXIT\tSTARTED\tUSER\tHOST\tLABEL")
	for _, j := range jobs {
		state := "ended"
		switch {
		case j.Running:
			state = "running"
		case !j.Ended:
			state = "elsewhere"
		}
		exit := "-"
		if j.ExitCode != nil {
			exit = strconv.Itoa(*j.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, state, exit, j.StartedAt.Local().Format(time.DateTime),
			orDash(j.User), orDash(j.HostID), showID(j.Label))
		if j.Note != "" {
			fmt.Fprintf(tw, "\t%s\n", j.Note)
		}
	}
	return tw.Flush()
}

func logsCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren logs", "[-f] [--offset N] [--stream stdout|stderr] --thread ID JOB")
	addThreadFlags(e, fs, &tf)
	follow := fs.Bool("f", false, "follow the output until the job ends")
	offset := fs.Int64("offset", 0, "start at this byte of the output read (negative: the oldest kept)")
	stream := fs.String("stream", "", "read stdout or stderr alone (default both, merged as they came); offsets are then that stream's")
	id, err := parseJobArgs(fs, &tf, args)
	if err != nil {
		return err
	}
	switch *stream {
	case "", "stdout", "stderr":
	default:
		return cli.Usagef("--stream %q: want stdout or stderr", *stream)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var exit *int
	var note string
	err = client.New(tf.socket).JobOutputStream(ctx, tf.tenant, tf.thread, id, *stream, *offset, *follow, func(f api.JobFrame) error {
		if f.Dropped > 0 {
			fmt.Fprintf(e.Stderr, "warren: %d bytes of the output were dropped before byte %d (a job keeps its newest 1 MiB)\n", f.Dropped, f.Offset)
		}
		if _, err := io.WriteString(e.Stdout, f.Data); err != nil {
			return err
		}
		if f.End {
			exit, note = f.Exit, f.Note
		}
		return nil
	})
	if err != nil && !(errors.Is(err, context.Canceled) && *follow) {
		return callError(tf.socket, "read the job's output", err)
	}
	// Why the job ended so, after its output.
	if note != "" {
		fmt.Fprintf(e.Stderr, "warren: %s\n", note)
	}
	// Following to the end, warren logs -f ends like the job.
	if *follow && exit != nil && *exit != 0 {
		return &exitCodeError{code: *exit}
	}
	return nil
}

func killCmd(ctx context.Context, e *cli.Env, args []string) error {
	var tf threadFlags
	fs := cli.NewFlags(e, "warren kill", "[--grace S | --signal NAME] --thread ID JOB")
	addThreadFlags(e, fs, &tf)
	grace := fs.Float64("grace", 0, "seconds between SIGTERM and SIGKILL (default 5)")
	sig := fs.String("signal", "", "send this signal to the job's whole tree instead (TERM, SIGUSR1, 2...); KILL ends it at once")
	id, err := parseJobArgs(fs, &tf, args)
	if err != nil {
		return err
	}
	c := client.New(tf.socket)
	var job api.JobInfo
	if *sig != "" {
		if *grace != 0 {
			return cli.Usagef("--grace is for the stop sequence: give it or --signal, not both")
		}
		out, err := c.SignalJob(ctx, tf.tenant, tf.thread, id, *sig)
		if err != nil {
			return callError(tf.socket, "signal the job", err)
		}
		if !out.Job.Ended {
			_, err = fmt.Fprintf(e.Stdout, "%s: %s sent\n", out.Job.ID, out.Signal)
			return err
		}
		job = out.Job
	} else {
		job, err = c.StopJob(ctx, tf.tenant, tf.thread, id, time.Duration(*grace*float64(time.Second)))
		if err != nil {
			return callError(tf.socket, "stop the job", err)
		}
	}
	exit := "no exit code recorded"
	if job.ExitCode != nil {
		exit = "exit " + strconv.Itoa(*job.ExitCode)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s ended (%s)\n", job.ID, exit)
	return err
}

// orDash shows an id, or "-" for none.
func orDash(id string) string {
	if id == "" {
		return "-"
	}
	return showID(id)
}

// parseJobArgs parses the flags of a verb that names a thread and one job,
// and returns the job's id.
func parseJobArgs(fs *flag.FlagSet, tf *threadFlags, args []string) (string, error) {
	rest, err := cli.Parse(fs, args)
	if err != nil {
		return "", err
	}
	if err := tf.check(); err != nil {
		return "", err
	}
	if len(rest) != 1 {
		return "", cli.Usagef("give one job id (bash-N)")
	}
	return rest[0], nil
}
