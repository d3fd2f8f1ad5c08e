package inspect

import (
	"fmt"
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// Handlers answers the API's calls on inspection mounts (/v1/mounts).
type Handlers struct {
	in *Inspections
}

// NewHandlers returns the handlers of in.
func NewHandlers(in *Inspections) *Handlers { return &Handlers{in: in} }

// Mount answers POST /v1/mounts, for the peer's uid.
func (h *Handlers) Mount(r *http.Request, _ call.Params) (any, error) {
	var req api.MountRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	mi, err := h.in.Mount(r.Context(), req, call.PeerFrom(r.Context()).UID)
	if err != nil {
		return nil, err
	}
	return api.MountResponse{Mount: mi}, nil
}

// Mounts answers GET /v1/mounts.
func (h *Handlers) Mounts(r *http.Request, _ call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	ms, err := h.in.List(r.Context())
	if err != nil {
		return nil, err
	}
	return api.MountsResponse{Mounts: ms}, nil
}

// Unmount answers DELETE /v1/mounts?path=DIR.
func (h *Handlers) Unmount(r *http.Request, _ call.Params) (any, error) {
	q, err := call.Query(r, "path")
	if err != nil {
		return nil, err
	}
	vs, ok := q["path"]
	if !ok || vs[0] == "" {
		return nil, fmt.Errorf("%w: the query parameter path is required", api.ErrInvalid)
	}
	inUse, err := h.in.Unmount(r.Context(), vs[0])
	if err != nil {
		return nil, err
	}
	return api.UnmountResponse{Unmounted: vs[0], InUse: inUse}, nil
}
