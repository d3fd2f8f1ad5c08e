package gateway

import (
	"net/http"

	"warren/api"
	"warren/gateway/call"
	"warren/internal/doctor"
	"warren/internal/version"
)

// handleVersion answers GET /v1/version: the daemon's build and what its
// kernel offers it (doctor's checks of those, read at each call: a module
// switch such as enable_uring may change while the daemon runs). A plain
// function, not one more method of Gateway: it needs none of its state.
func handleVersion(r *http.Request, p call.Params) (any, error) {
	return DaemonVersion(), nil
}

// DaemonVersion is the daemon's build and its kernel's features, as GET
// /v1/version and `warrend --version` say them.
func DaemonVersion() api.Version {
	v := version.Get()
	for _, f := range doctor.KernelFeatures(doctor.System()) {
		v.Kernel = append(v.Kernel, api.KernelFeature{Name: f.Name, OK: f.Status == doctor.OK, Detail: f.Detail})
	}
	return v
}
