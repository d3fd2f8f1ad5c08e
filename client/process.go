package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"warren/api"
)

// Signal sends sig to a running command's whole process tree in its jail
// (see api.SignalRequest for the names it takes) and returns the answer,
// which names the signal sent. A command that ended, or became a job, is
// an error matching api.ErrConflict; one that never ran there,
// api.ErrNotFound.
func (c *Client) Signal(ctx context.Context, tenant, thread, execID, sig string) (api.SignalExecResponse, error) {
	var out api.SignalExecResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/exec/"+escapeID(execID)+"/signal", nil,
		api.SignalRequest{Signal: api.Signal(sig)}, &out)
	return out, err
}

// SignalJob sends sig to a running job's whole process tree in its jail
// and returns the job as it is then; SIGKILL returns once its end is
// recorded. A job that ended, or runs on another host, is an error
// matching api.ErrConflict.
func (c *Client) SignalJob(ctx context.Context, tenant, thread, id, sig string) (api.SignalJobResponse, error) {
	var out api.SignalJobResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/jobs/"+escapeID(id)+"/signal", nil,
		api.SignalRequest{Signal: api.Signal(sig)}, &out)
	return out, err
}

// JobOutputStream is JobOutput of one view of the output: stream is
// api.JobStreamStdout or api.JobStreamStderr for that stream alone, with
// offsets of its own, or api.JobStreamAll (or "") for both merged. Each
// frame with data says its stream.
func (c *Client) JobOutputStream(ctx context.Context, tenant, thread, id, stream string, offset int64, follow bool, fn func(api.JobFrame) error) error {
	path := threadPath(tenant, thread) + "/jobs/" + escapeID(id) + "/output"
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	if stream != "" {
		q.Set("stream", stream)
	}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, methodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var f api.JobFrame
		if err := dec.Decode(&f); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("GET %s: the answer ended early: %w", path, err)
		}
		if err := fn(f); err != nil {
			return err
		}
		if f.End || (f.Data == "" && !follow) {
			io.Copy(io.Discard, resp.Body)
			return nil
		}
	}
}
