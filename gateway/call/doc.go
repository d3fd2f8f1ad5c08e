// Package call is what every room of the daemon shares about a call of
// the API: the ids of a request (Params) and their checks (ThreadKey),
// the bounds of client input (input.go), the refusals and the one table
// from errors to statuses and codes (refusal.go), the decoding of a body
// and a query, and who is on the other end of the socket (peer_linux.go).
//
// It keeps no state and imports no room: each room's handlers use it, and
// the router of package gateway answers what they return. A handler
// (Handler) checks its request and returns a value the router encodes as
// JSON, a Streamer that writes itself, or an error the router classifies
// (Classify) and answers as {"error":{"code","message"}}.
package call
