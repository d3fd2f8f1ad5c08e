package jobs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/jail"
)

// Why a command or a job ended as it did: its end's reason (an api.Reason*
// code) and note (a sentence). Only what the gateway did to it (its
// timeout, the end of its jail, a client's signal) or what the kernel
// counted while it ran (the jail cgroup's OOM kills and refused forks,
// jail.Ended) gives a reason: an exit of 137 or 124 alone never does, for
// a command may exit so by itself.

// endCause is what the gateway did to a command that may explain its end.
type endCause struct {
	// timeout is the time limit that ended it, 0 if none did.
	timeout time.Duration
	// stopping says why the gateway ended its jail ("" if it did not).
	stopping string
	// signalled says a client sent it a signal; stopped, that the signal
	// was a stop (of a job).
	signalled, stopped bool
}

// endReason returns the reason and note of a command's end: none for one
// that ended by itself. memory and procs are its jail's limits.
func endReason(end jail.Ended, err error, c endCause, memory int64, procs int) (reason, note string) {
	failed := end.Exit != 0
	switch {
	case c.timeout > 0:
		return api.ReasonTimeout, fmt.Sprintf("timed out after %s (the command's timeout)", shortDuration(c.timeout))
	case failed && end.OOMKills > 0:
		// Before the jail's end: an OOM kill of the init ends the jail.
		return api.ReasonOOM, fmt.Sprintf("killed: out of memory (the thread's limit is %s)", sizeText(memory))
	case errors.Is(err, jail.ErrInitGone) && c.stopping != "":
		return api.ReasonReclaimed, fmt.Sprintf("stopped: the jail was reclaimed (%s)", c.stopping)
	case failed && end.ForkFails > 0:
		return api.ReasonPids, fmt.Sprintf("killed: the thread's process limit (%d) was reached", procs)
	case c.signalled && end.Signal != 0:
		name := signalName(end.Signal)
		if c.stopped {
			return api.ReasonKilled, fmt.Sprintf("killed: stopped by the client (%s)", name)
		}
		return api.ReasonKilled, fmt.Sprintf("killed: %s sent by the client", name)
	}
	return "", ""
}

// shortDuration writes d as a person would: 1s, 1.5s, 10m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// sizeText writes n bytes in the largest binary unit that holds it whole:
// 64 MiB, 2 GiB, 1536 KiB.
func sizeText(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
