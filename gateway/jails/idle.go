package jails

import (
	"fmt"
	"time"

	"warren/api"
	"warren/meta"
)

// The jails' half of the idle reclaim (the gateway's idle loop calls
// ReclaimIdle at each tick): a jail in which no command or job ran for
// the thread's jail idle time (Config.Idle, or its settings'
// JailIdleSeconds) is stopped. The thread stays bound and mounted; its
// next command starts a new jail (thread). Nothing runs in it by
// construction: the jail is taken out of the set, under its lock, only
// while no command is registered and it was last found longer ago than
// the idle time, and only when no job of the thread runs (Jobs.Busy,
// asked before the lock is taken).
//
// A command that waited longer than the jail idle time between finding
// its jail and starting in it would find the jail gone (exit 137); idle
// times are minutes.

// DefaultJailIdle is how long a jail may stay idle unless the daemon or
// the thread says otherwise.
const DefaultJailIdle = 30 * time.Minute

// IdleOf turns a daemon default and a thread setting into an idle time;
// 0 means never.
func IdleOf(daemon time.Duration, seconds int64, def time.Duration) time.Duration {
	switch {
	case seconds < 0:
		return 0
	case seconds > 0:
		return time.Duration(seconds) * time.Second
	case daemon < 0:
		return 0
	case daemon > 0:
		return daemon
	}
	return def
}

// ReclaimIdle stops the jails idle past their time.
func (js *Jails) ReclaimIdle() {
	now := time.Now()
	busy := js.jobs.Busy()

	type reclaimed struct {
		k    meta.ThreadKey
		tj   *ThreadJail
		idle time.Duration
	}
	var out []reclaimed
	js.mu.Lock()
	running := js.runningLocked()
	for k, tj := range js.jails {
		idle := IdleOf(js.cfg.Idle, tj.settings.JailIdleSeconds, DefaultJailIdle)
		if idle == 0 || busy[k] || running[k] || tj.holds > 0 || now.Sub(tj.used) < idle {
			continue
		}
		if _, restoring := js.restoring[k]; restoring {
			continue
		}
		delete(js.jails, k)
		out = append(out, reclaimed{k, tj, now.Sub(tj.used)})
	}
	js.mu.Unlock()

	for _, r := range out {
		js.end(r.k, r.tj)
		js.log.Info("jail reclaimed: idle", "tenant", r.k.Tenant, "thread", r.k.Thread, "idle", r.idle.Round(time.Second))
		js.events.Emit(api.Event{Type: api.EventJailReclaimed, Tenant: r.k.Tenant, Thread: r.k.Thread,
			Message: fmt.Sprintf("No command or job ran in the jail for %v: it was stopped to give its memory back. The next command starts a new one.", r.idle.Round(time.Second))})
	}
}

// LastUsed returns when k's jail was last found or ended a command in,
// and whether k has a jail.
func (js *Jails) LastUsed(k meta.ThreadKey) (time.Time, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	if tj == nil {
		return time.Time{}, false
	}
	return tj.used, true
}

// Runs reports whether a foreground command of k runs.
func (js *Jails) Runs(k meta.ThreadKey) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, c := range js.execs {
		if c.Thread() == k {
			return true
		}
	}
	return false
}
