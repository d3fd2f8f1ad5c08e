package ports

import (
	"fmt"
	"net/http"
	"strconv"

	"warren/api"
	"warren/gateway/call"
)

// The API of the ports' channels.

// Handlers answers the calls of the ports: open a channel (or a plain
// TCP connection, through an upgrade) and close one.
type Handlers struct{ p *Ports }

// NewHandlers returns the handlers of p's calls.
func NewHandlers(p *Ports) *Handlers { return &Handlers{p: p} }

// OpenPort answers POST .../ports/{port}: the port's channel, or, asked for
// an upgrade to tcp, the connection itself.
func (h *Handlers) OpenPort(r *http.Request, p call.Params) (any, error) {
	port, err := parsePort(p.Port)
	if err != nil {
		return nil, err
	}
	if IsUpgrade(r) {
		if err := call.NoQuery(r); err != nil {
			return nil, err
		}
		return h.p.Upgrade(r.Context(), p.Tenant, p.Thread, port)
	}
	if err := call.DecodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	return h.p.Open(r.Context(), p.Tenant, p.Thread, port)
}

// ClosePort answers DELETE .../ports/{port}.
func (h *Handlers) ClosePort(r *http.Request, p call.Params) (any, error) {
	port, err := parsePort(p.Port)
	if err != nil {
		return nil, err
	}
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	k, err := call.ThreadKey(p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return h.p.Remove(k, port)
}

// parsePort reads a port from the path: a decimal number from 1 to 65535.
func parsePort(s string) (int, error) {
	port, err := strconv.Atoi(s)
	if err != nil || s == "" || len(s) > 5 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%w: port %s is not a number from 1 to 65535", api.ErrInvalid, call.Quote(s))
	}
	return port, CheckPort(port)
}
