package threads

import (
	"context"
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// Handlers answer the thread calls: bind, show, close, delete, and the
// listing of threads (GET /v1/threads).
type Handlers struct{ t *Threads }

// NewHandlers returns the handlers of t.
func NewHandlers(t *Threads) *Handlers { return &Handlers{t: t} }

func (h *Handlers) Bind(r *http.Request, p call.Params) (any, error) {
	// A bind that names an image not in the store pulls it first: the
	// pull's progress is the call's (call.WithProgress).
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.BindRequest
		if err := call.DecodeBody(r, &req, true); err != nil {
			return nil, err
		}
		ti, err := h.t.BindWith(ctx, p.Tenant, p.Thread, req.Settings)
		if err != nil {
			return nil, err
		}
		return api.BindResponse{Binding: ti, MountPath: ti.MountPath}, nil
	})
}

func (h *Handlers) Show(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	ti, err := h.t.Show(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

func (h *Handlers) Close(r *http.Request, p call.Params) (any, error) {
	if err := call.DecodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	ti, err := h.t.CloseThread(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

// Delete answers DELETE .../threads/{thread}, with its progress when
// asked (call.WithProgress).
func (h *Handlers) Delete(r *http.Request, p call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		if err := call.NoQuery(r); err != nil {
			return nil, err
		}
		k, err := call.ThreadKey(p.Tenant, p.Thread)
		if err != nil {
			return nil, err
		}
		if err := h.t.Delete(ctx, k.Tenant, k.Thread); err != nil {
			return nil, err
		}
		return api.DeleteResponse{Deleted: k}, nil
	})
}

func (h *Handlers) List(r *http.Request, _ call.Params) (any, error) {
	q, err := call.Query(r, "tenant", "limit", "cursor")
	if err != nil {
		return nil, err
	}
	var tenant *string
	if vs, ok := q["tenant"]; ok {
		tenant = &vs[0]
	}
	limit, after, err := pageQuery(q)
	if err != nil {
		return nil, err
	}
	tis, next, err := h.t.List(r.Context(), tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ThreadsResponse{Bindings: tis, NextCursor: next}, nil
}
