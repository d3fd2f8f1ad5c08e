package gateway

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// The operational endpoints: the process answers (/healthz), the server
// may take work (/readyz; package health), and its metrics (/metrics,
// package metrics). They are on the API's socket, for a peer allowed
// there, and on Config.MetricsAddr, where nothing else is served.

// opsRoutes are the operational endpoints, in the route table (routes)
// like every call, and alone on the metrics listener.
func opsRoutes(h handlers) []route {
	return []route{
		{http.MethodGet, "/healthz", h.health.Health},
		{http.MethodGet, "/readyz", h.health.Ready},     // answers a call.Streamer
		{http.MethodGet, "/metrics", h.metrics.Metrics}, // answers a call.Streamer
	}
}

// startMetricsListener serves the operational endpoints, and nothing
// else, on Config.MetricsAddr (TCP), if it is set.
func (g *Gateway) startMetricsListener() error {
	if g.cfg.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", g.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", g.cfg.MetricsAddr, err)
	}
	// The peers of a TCP listener have no credentials to check: it
	// serves the operational endpoints and nothing else.
	rt := newRouter(g, opsRoutes(g.handlers()), true)
	g.metricsSrv = &http.Server{
		Handler:           rt,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          g.log.Named("metrics").StandardLogger(nil),
	}
	g.metricsDone = make(chan struct{})
	go func() {
		defer close(g.metricsDone)
		if err := g.metricsSrv.Serve(ln); err != nil && err != http.ErrServerClosed {
			g.log.Error("metrics listener failed", "addr", g.cfg.MetricsAddr, "error", err)
		}
	}()
	g.log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}

// stopMetricsListener stops the metrics listener and waits for it.
func (g *Gateway) stopMetricsListener() {
	if g.metricsSrv == nil {
		return
	}
	g.metricsSrv.Close()
	<-g.metricsDone
}
