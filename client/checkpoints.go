package client

import (
	"context"
	"net/url"

	"warren/api"
)

// Checkpoint takes a checkpoint of a thread's workspace.
func (c *Client) Checkpoint(ctx context.Context, tenant, thread string, req api.CheckpointRequest) (api.CheckpointResponse, error) {
	var out api.CheckpointResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/checkpoints", req, &out)
	return out, err
}

// Checkpoints lists a thread's checkpoints, oldest first, with its head
// and redo stack.
func (c *Client) Checkpoints(ctx context.Context, tenant, thread string) (api.CheckpointsResponse, error) {
	var out api.CheckpointsResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread)+"/checkpoints", nil, nil, &out)
	return out, err
}

// Diff says what makes checkpoint from into checkpoint to: "" for from is
// the head, "" or "now" for to is the workspace as it is. With text, the
// answer carries unified diffs of the text files.
func (c *Client) Diff(ctx context.Context, tenant, thread, from, to string, text bool) (api.DiffResponse, error) {
	q := url.Values{}
	if from != "" {
		q.Set("from", from)
	}
	if to != "" {
		q.Set("to", to)
	}
	if text {
		q.Set("text", "true")
	}
	var out api.DiffResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread)+"/diff", q, nil, &out)
	return out, err
}

// Undo restores the checkpoint before the workspace's state; force stops
// the thread's commands and jobs first.
func (c *Client) Undo(ctx context.Context, tenant, thread string, force bool) (api.RestoreResponse, error) {
	var out api.RestoreResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/undo", api.RestoreRequest{Force: force}, &out)
	return out, err
}

// Redo restores the checkpoint the last undo left.
func (c *Client) Redo(ctx context.Context, tenant, thread string, force bool) (api.RestoreResponse, error) {
	var out api.RestoreResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/redo", api.RestoreRequest{Force: force}, &out)
	return out, err
}

// Revert restores checkpoint id.
func (c *Client) Revert(ctx context.Context, tenant, thread, id string, force bool) (api.RestoreResponse, error) {
	var out api.RestoreResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/revert", api.RestoreRequest{Checkpoint: id, Force: force}, &out)
	return out, err
}

// Fork makes a new thread of the tenant whose workspace starts at a
// checkpoint of this one.
func (c *Client) Fork(ctx context.Context, tenant, thread string, req api.ForkRequest) (api.ForkResponse, error) {
	var out api.ForkResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/fork", req, &out)
	return out, err
}
