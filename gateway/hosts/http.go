package hosts

import (
	"context"
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// Binder binds a thread here (package threads), once Unpin may move it.
type Binder interface {
	Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error)
}

// Handlers answer the host calls: POST .../threads/{thread}/unpin and GET
// /v1/hosts.
type Handlers struct {
	hosts   *Hosts
	threads Binder
}

// NewHandlers returns the handlers of h; threads binds an unpinned thread.
func NewHandlers(h *Hosts, threads Binder) *Handlers {
	return &Handlers{hosts: h, threads: threads}
}

// Unpin moves a thread to this daemon at once, if the host that holds it
// is no longer alive; while it lives, the call is refused.
func (h *Handlers) Unpin(r *http.Request, p call.Params) (any, error) {
	if err := call.DecodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	k, err := call.ThreadKey(p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	if err := h.hosts.MayUnpin(r.Context(), k); err != nil {
		return nil, err
	}
	ti, err := h.threads.Bind(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

// Hosts lists the hosts the store knows.
func (h *Handlers) Hosts(r *http.Request, _ call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	hs, err := h.hosts.List(r.Context())
	if err != nil {
		return nil, err
	}
	return api.HostsResponse{Hosts: hs}, nil
}
