package network

import (
	"context"
	"fmt"
	"net/http"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
)

// Threads is what the network call asks of the threads room: a change of
// a thread's settings under its lock.
type Threads interface {
	UpdateSettings(ctx context.Context, tenant, thread string, change func(meta.Settings) (meta.Settings, error)) (api.ThreadInfo, error)
}

// Handlers answer the network call.
type Handlers struct{ t Threads }

// NewHandlers returns the network call's handlers.
func NewHandlers(t Threads) *Handlers { return &Handlers{t: t} }

// SetNetwork replaces a thread's egress rules, leaving its other settings
// as they are; a running jail follows them at once. The thread must be in
// network egress: rules of another mode would do nothing.
func (h *Handlers) SetNetwork(r *http.Request, p call.Params) (any, error) {
	var req meta.Egress
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	ti, err := h.t.UpdateSettings(r.Context(), p.Tenant, p.Thread, func(s meta.Settings) (meta.Settings, error) {
		if s.Network != "egress" {
			mode := s.Network
			if mode == "" {
				mode = "the server's default"
			}
			return s, fmt.Errorf("%w: thread %s has network %s, not egress: bind it with --network egress (close it first if its jail runs)",
				api.ErrConflict, p.Thread, mode)
		}
		e := req
		s.Egress = &e
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return api.BindResponse{Binding: ti, MountPath: ti.MountPath}, nil
}
