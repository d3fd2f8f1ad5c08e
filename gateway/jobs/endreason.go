package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
)

// Why a command or a job ended as it did: its end's reason (an api.Reason*
// code) and note (a sentence). Only what the gateway did to it (its
// timeout, the end of its jail, a client's signal) or what the kernel
// counted while it ran (the jail cgroup's OOM kills and refused forks,
// jail.Ended) gives a reason: an exit of 137 or 124 alone never does, for
// a command may exit so by itself. So does, for a failed command, a name
// lookup in a jail without network (lookupNote).

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

// lookupNote adds to the reason and note of a command of k that failed
// (code, its exit, not 0) in a jail without network, having asked for a
// name since began, why: its lookups fail. The reason is kept if there is
// one. The jail's lookups are counted whichever of its commands made
// them: another command of the thread that looked a name up meanwhile
// counts too.
func (js *Jobs) lookupNote(k meta.ThreadKey, began time.Time, code int, reason, note string) (string, string) {
	if code == 0 || js.cfg.Lookups == nil {
		return reason, note
	}
	name, ok := js.cfg.Lookups.TriedToResolve(k, began)
	if !ok {
		return reason, note
	}
	if reason == "" {
		reason = api.ReasonNoNetwork
	}
	if note != "" {
		note += "; "
	}
	return reason, note + noNetworkNote(name, slices.Contains(js.cfg.Lookups.Modes(), "egress"))
}

// noNetworkNote says why a lookup of name failed in a jail without
// network, and which setting gives one, if the server allows it.
func noNetworkNote(name string, egress bool) string {
	s := fmt.Sprintf("the thread has no network (network: none): name lookups fail (it looked up %s)", call.Quote(name))
	if egress {
		return s + "; bind it with --network egress to reach the network the server allows"
	}
	return s + "; this server gives its threads no network (serve --allow-networks)"
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
