package gateway

import (
	"fmt"
	"net/http"
	"strconv"

	"warren/api"
	"warren/gateway/call"
)

// The API of checkpoints (checkpoints.go).

func (g *Gateway) handleCheckpoint(r *http.Request, p call.Params) (any, error) {
	var req api.CheckpointRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	return g.checkpoint(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleCheckpoints(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	return g.listCheckpoints(r.Context(), p.Tenant, p.Thread)
}

func (g *Gateway) handleDiff(r *http.Request, p call.Params) (any, error) {
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
	return g.diff(r.Context(), p.Tenant, p.Thread, q.Get("from"), q.Get("to"), text)
}

func (g *Gateway) handleUndo(r *http.Request, p call.Params) (any, error) {
	var req api.RestoreRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	if req.Checkpoint != "" {
		return nil, fmt.Errorf("%w: undo takes no checkpoint: it goes back one (revert goes to a given one)", api.ErrInvalid)
	}
	return g.undo(r.Context(), p.Tenant, p.Thread, req.Force)
}

func (g *Gateway) handleRedo(r *http.Request, p call.Params) (any, error) {
	var req api.RestoreRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	if req.Checkpoint != "" {
		return nil, fmt.Errorf("%w: redo takes no checkpoint: it goes forward one (revert goes to a given one)", api.ErrInvalid)
	}
	return g.redo(r.Context(), p.Tenant, p.Thread, req.Force)
}

func (g *Gateway) handleRevert(r *http.Request, p call.Params) (any, error) {
	var req api.RestoreRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.revert(r.Context(), p.Tenant, p.Thread, req.Checkpoint, req.Force)
}

func (g *Gateway) handleFork(r *http.Request, p call.Params) (any, error) {
	var req api.ForkRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	return g.fork(r.Context(), p.Tenant, p.Thread, req)
}
