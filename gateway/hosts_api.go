package gateway

import "warren/api"
import "net/http"

// The handlers of the host calls: POST
// /v1/tenants/{tenant}/threads/{thread}/unpin and GET /v1/hosts
// (hosts.go does the work).

func (g *Gateway) handleUnpin(r *http.Request, p params) (any, error) {
	if err := decodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	ti, err := g.unpin(r.Context(), p.tenant, p.thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

func (g *Gateway) handleHosts(r *http.Request, _ params) (any, error) {
	if err := noQuery(r); err != nil {
		return nil, err
	}
	hs, err := g.listHosts(r.Context())
	if err != nil {
		return nil, err
	}
	return api.HostsResponse{Hosts: hs}, nil
}
