package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"warren/api"
	"warren/client"
)

// A job's stdout and stderr are kept apart as well as merged: each view
// has offsets of its own, and every frame says its stream.
func ExampleClient_JobOutputStream() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	defer c.DeleteThread(ctx, "examples", "streams")
	j, err := c.Spawn(ctx, "examples", "streams", api.SpawnRequest{Command: `echo to stdout; echo to stderr >&2; exit 2`})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, stream := range []string{api.JobStreamStdout, api.JobStreamStderr, api.JobStreamAll} {
		// Following, the reading ends with the job.
		err := c.JobOutputStream(ctx, "examples", "streams", j.ID, stream, 0, true, func(f api.JobFrame) error {
			if f.Data != "" {
				fmt.Printf("%s: %s at %d: %q\n", stream, f.Stream, f.Offset, f.Data)
			}
			if f.End {
				fmt.Printf("%s: exit %d\n", stream, *f.Exit)
			}
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// stdout: stdout at 0: "to stdout\n"
	// stdout: exit 2
	// stderr: stderr at 0: "to stderr\n"
	// stderr: exit 2
	// all: stdout at 0: "to stdout\n"
	// all: stderr at 10: "to stderr\n"
	// all: exit 2
}

// A signal goes to the job's whole process tree in its jail; SIGKILL
// ends the job at once and returns it ended.
func ExampleClient_SignalJob() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	const tenant, thread = "examples", "signals"
	defer c.DeleteThread(ctx, tenant, thread)
	j, err := c.Spawn(ctx, tenant, thread, api.SpawnRequest{Command: `trap 'echo reloading' HUP; echo ready; while :; do sleep 0.1; done`})
	if err != nil {
		fmt.Println(err)
		return
	}
	// waitFor follows the job's stdout until it says line.
	errSeen := errors.New("seen")
	waitFor := func(line string) {
		var out strings.Builder
		err := c.JobOutputStream(ctx, tenant, thread, j.ID, api.JobStreamStdout, 0, true, func(f api.JobFrame) error {
			if out.WriteString(f.Data); strings.Contains(out.String(), line) {
				return errSeen
			}
			return nil
		})
		if !errors.Is(err, errSeen) {
			fmt.Println(err)
		}
		fmt.Println(line)
	}
	waitFor("ready")
	sent, err := c.SignalJob(ctx, tenant, thread, j.ID, "hup")
	fmt.Println(sent.Signal, "sent to", sent.Job.ID, err)
	waitFor("reloading")
	killed, err := c.SignalJob(ctx, tenant, thread, j.ID, "KILL")
	fmt.Printf("%s: exit %d, %s %v\n", killed.Signal, *killed.Job.ExitCode, killed.Job.Note, err)
	_, err = c.SignalJob(ctx, tenant, thread, j.ID, "TERM")
	fmt.Println(errors.Is(err, api.ErrConflict))
	// Output:
	// ready
	// SIGHUP sent to bash-1 <nil>
	// reloading
	// SIGKILL: exit 137, Background job bash-1 was killed by SIGKILL at the client's request. <nil>
	// true
}
