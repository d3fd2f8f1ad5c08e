package gateway

import (
	"time"

	"warren/fs"
	"warren/gateway/metrics"
	"warren/gateway/threadlimit"
)

// metricsFigures are the figures the metrics read from g at each scrape.
// Each reads g's field when called: Start fills some (the events, the
// background restore) after it registers them.
func metricsFigures(g *Gateway) metrics.Figures {
	return metrics.Figures{
		Threads:     func() (int, int) { return g.threads.Counts() },
		Admission:   func() threadlimit.Headroom { return g.threads.Headroom() },
		Jails:       func() int { return g.jails.Count() },
		JailsLive:   func() (int, int) { return g.jails.Live() },
		JobsRunning: func() int { return g.jobs.Count() },
		Events:      func() (int, uint64) { return g.events.Stats() },
		Lease:       func() (bool, time.Time) { return g.hosts.Valid() },
		Descriptors: func() fs.DescriptorStats { return g.hub.Descriptors() },
		LockWaits:   func() int { return g.hub.LockWaits() },
		RestoreLeft: func() int { return g.threads.RestoreLeft() },
	}
}
