package api

// PortChannel is a channel to a port of a thread's jail
// (POST /v1/tenants/{t}/threads/{th}/ports/{port}), the
// @tanstack/ai-sandbox contract's SandboxChannel: URL is a loopback
// listener of the daemon (http://127.0.0.1:PORT, no path) that forwards
// HTTP and WebSocket to the port inside the jail, and every request to
// it must carry Headers (Authorization: Bearer Token); one without is
// answered 401 and never reaches the jail.
type PortChannel struct {
	URL     string            `json:"url"`
	Token   string            `json:"token"`
	Headers map[string]string `json:"headers"`
	// Port is the port in the jail.
	Port int `json:"port"`
}

// PortClosed answers DELETE .../ports/{port}: Closed says whether a
// channel was open (it is closed now, with the plain TCP connections to
// that port).
type PortClosed struct {
	Port   int  `json:"port"`
	Closed bool `json:"closed"`
}

// PortUpgrade is the Upgrade protocol of a plain TCP connection to a
// jail's port through the API socket: a POST to .../ports/{port} with
// "Connection: Upgrade" and "Upgrade: tcp" is answered 101 Switching
// Protocols, and from then on the socket connection carries the bytes of
// a TCP connection to the port in the jail, both ways.
const PortUpgrade = "tcp"
