// Package api holds the wire types of warren's HTTP API: the request and
// response bodies, the frames of the streaming answers (exec output, job
// output, events), the error codes and the errors a client matches with
// errors.Is.
//
// It is shared by the daemon (package gateway), which answers with these
// types, and by the Go client (package warren/client), which decodes into
// them. It imports only the standard library and the plain data types of
// package meta, so a client links none of the daemon: no FUSE, no store
// backend. docs/api.md is the reference for what each call does.
package api
