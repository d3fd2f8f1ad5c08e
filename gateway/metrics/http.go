package metrics

import (
	"net/http"

	"warren/gateway/call"
)

// Handlers are the metrics' API call.
type Handlers struct {
	m *Metrics
}

// NewHandlers returns the API call of m.
func NewHandlers(m *Metrics) *Handlers { return &Handlers{m: m} }

// Metrics answers GET /metrics: the series in Prometheus' text format.
func (h *Handlers) Metrics(r *http.Request, p call.Params) (any, error) {
	return metricsAnswer{h.m}, nil
}

// metricsAnswer is the metrics in Prometheus' text format.
type metricsAnswer struct{ m *Metrics }

func (a metricsAnswer) ServeStream(w http.ResponseWriter, r *http.Request) {
	a.m.Handler().ServeHTTP(w, r)
}
