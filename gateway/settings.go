package gateway

import (
	"warren/gateway/jails"
	"warren/gateway/jobs"
	"warren/gateway/threads"
)

// Defaults and bounds of a thread's settings that the CLI names; the
// threads room checks settings (package threads, settings.go).
const (
	// MaxCPUMillis is the largest CPU bound, in thousandths of a CPU.
	MaxCPUMillis = threads.MaxCPUMillis
	// DefaultMaxJobs is how many background jobs a thread runs at once
	// unless its settings or Config.MaxJobs say otherwise.
	DefaultMaxJobs = jobs.DefaultMaxJobs
	// DefaultJailIdle is how long a jail may stay idle unless the daemon
	// or the thread says otherwise.
	DefaultJailIdle = jails.DefaultJailIdle
)
