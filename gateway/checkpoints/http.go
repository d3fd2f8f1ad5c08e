package checkpoints

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"warren/api"
	"warren/gateway/call"
)

// Handlers answer the API's calls of checkpoints and restores.
type Handlers struct {
	c *Checkpoints
}

// NewHandlers returns the handlers of c's calls.
func NewHandlers(c *Checkpoints) *Handlers { return &Handlers{c: c} }

// Checkpoint answers POST .../checkpoints: takes a checkpoint. It and
// the restores and fork below answer with their progress when asked
// (call.WithProgress).
func (h *Handlers) Checkpoint(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.CheckpointRequest
		if err := call.DecodeBody(r, &req, true); err != nil {
			return nil, err
		}
		return h.c.checkpoint(ctx, p.Tenant, p.Thread, req)
	})
}

// List answers GET .../checkpoints: the thread's checkpoints.
func (h *Handlers) List(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	return h.c.listCheckpoints(r.Context(), p.Tenant, p.Thread)
}

// Diff answers GET .../diff: what makes one checkpoint another.
func (h *Handlers) Diff(r *http.Request, p call.Params) (any, error) {
	q, err := call.Query(r, "from", "to", "text")
	if err != nil {
		return nil, err
	}
	text := false
	if v := q.Get("text"); v != "" {
		if text, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: text must be true or false, not %s", api.ErrInvalid, call.Quote(v))
		}
	}
	return h.c.diff(r.Context(), p.Tenant, p.Thread, q.Get("from"), q.Get("to"), text)
}

// Undo answers POST .../undo.
func (h *Handlers) Undo(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.RestoreRequest
		if err := call.DecodeBody(r, &req, true); err != nil {
			return nil, err
		}
		if req.Checkpoint != "" {
			return nil, fmt.Errorf("%w: undo takes no checkpoint: it goes back one (revert goes to a given one)", api.ErrInvalid)
		}
		return h.c.undo(ctx, p.Tenant, p.Thread, req.Force)
	})
}

// Redo answers POST .../redo.
func (h *Handlers) Redo(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.RestoreRequest
		if err := call.DecodeBody(r, &req, true); err != nil {
			return nil, err
		}
		if req.Checkpoint != "" {
			return nil, fmt.Errorf("%w: redo takes no checkpoint: it goes forward one (revert goes to a given one)", api.ErrInvalid)
		}
		return h.c.redo(ctx, p.Tenant, p.Thread, req.Force)
	})
}

// Revert answers POST .../revert: restores a given checkpoint.
func (h *Handlers) Revert(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.RestoreRequest
		if err := call.DecodeBody(r, &req, false); err != nil {
			return nil, err
		}
		return h.c.revert(ctx, p.Tenant, p.Thread, req.Checkpoint, req.Force)
	})
}

// Fork answers POST .../fork: a new thread at a checkpoint.
func (h *Handlers) Fork(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.ForkRequest
		if err := call.DecodeBody(r, &req, true); err != nil {
			return nil, err
		}
		return h.c.fork(ctx, p.Tenant, p.Thread, req)
	})
}
