package api

// Health is the answer of GET /healthz: the daemon's process answers.
type Health struct {
	Status string `json:"status"` // always "ok"
	// Revision is the daemon's commit (short hash), as GET /v1/version
	// says it: which build answers, for a rollout.
	Revision string `json:"revision,omitempty"`
}

// Readiness is the answer of GET /readyz: 200 when every check passes,
// 503 otherwise. A load balancer sends new threads only to a ready server.
type Readiness struct {
	Ready  bool         `json:"ready"`
	Checks []ReadyCheck `json:"checks"`
	// Restoring counts the threads of the former run that the start has
	// still to serve again, in the background (0 once it is done). It
	// does not make the server unready: a call for one of them serves it
	// at once.
	Restoring int `json:"restoring,omitempty"`
}

// ReadyCheck is one check of a readiness answer. Name is one of serving,
// store, lease, disk, descriptors, admission and restore; Detail says what
// was found (for admission, the headroom of the limits of new threads), and
// what to fix when OK is false.
type ReadyCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}
