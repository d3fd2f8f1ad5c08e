// Package client is the Go client of warren's API: one Client talks to a
// daemon (warrend, or `warren serve`) over its Unix socket, with the wire
// types of package api.
//
// Every error answer comes back as an *api.APIError, which matches the
// sentinel of its code with errors.Is: api.ErrNotFound, api.ErrStale,
// api.ErrUnavailable (the metadata store did not answer: retry after a
// pause), api.ErrClosed (the daemon is shutting down: give up or connect
// again later) and the others api lists. Errors of the socket itself (no
// daemon, no permission) come back wrapped as they are.
//
// The package imports only the standard library and package api (and
// meta's plain data types through it), so a program that uses it links
// none of the daemon. Nor net/http: it speaks HTTP/1.1 to the socket with
// a small transport of its own (transport.go), since net/http links TLS,
// x509 and HTTP/2, whose init alone would be a quarter of a CLI call.
package client
