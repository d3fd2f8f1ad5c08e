package gateway

import (
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// The handlers of the host calls: POST
// /v1/tenants/{tenant}/threads/{thread}/unpin and GET /v1/hosts
// (hosts.go does the work).

func (g *Gateway) handleUnpin(r *http.Request, p call.Params) (any, error) {
	if err := call.DecodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	ti, err := g.unpin(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

func (g *Gateway) handleHosts(r *http.Request, _ call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	hs, err := g.listHosts(r.Context())
	if err != nil {
		return nil, err
	}
	return api.HostsResponse{Hosts: hs}, nil
}
