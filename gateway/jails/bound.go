package jails

import (
	"fmt"
	"slices"
	"time"

	"warren/api"
	"warren/meta"
)

// The bound of live jails (Config.MaxJails). A live jail costs the
// machine its init, its namespaces, its cgroup and their memory, whether
// or not anything runs in it; bound threads cost a mount each. So jails
// are bounded apart from threads: a thousand bound threads may share a
// few hundred jails, a jail being made at a thread's command and stopped
// when it is not needed.
//
// A jail about to start takes a place (reserve): one under the bound,
// or the place of the least recently used idle jail, which is stopped for
// it. Idle means nothing uses the jail: no command of it is registered
// (an exec, with or without a terminal), no job of its thread runs or is
// being started or moved (its job slots; a thread closed while its jobs
// ran counts as busy too), no call holds it between finding it and
// registering its command (threadJail.holds), and its workspace is not
// being restored. The stopped jail's thread stays bound and mounted; its
// next command starts a new jail, as after the idle reclaim (idle.go).
// When every jail is busy the call is refused with 503 unavailable
// naming the limit: a command ending frees a place.
//
// Locks: Jails.mu and the jobs room's lock are leaves taken one at a
// time. The choice is made under Jails.mu, the jobs are asked under
// theirs (Jobs.Busy), and the choice is checked again under Jails.mu: a jail held, or
// found, meanwhile (its uses changed) is not taken. A command registers
// itself while it holds its jail, and a job takes its slot while it
// holds its jail, so a jail that looks idle under both locks in turn,
// and was not found in between, is idle.

// jailCandidate is an idle-looking jail, as the bound saw it.
type jailCandidate struct {
	k    meta.ThreadKey
	tj   *ThreadJail
	uses uint64
}

// reserveTries bounds how often reserve looks again when the jails
// it chose were used while it asked the jobs.
const reserveTries = 4

// reserve takes a place for a new jail of k: one under the bound, or
// the place of the least recently used idle jail, which it stops. It
// refuses with 503 unavailable, naming --max-jails, when every jail is
// busy. The caller gives the place back with unreserve if the jail does
// not start, or fills it with add.
func (js *Jails) reserve(k meta.ThreadKey) error {
	for range reserveTries {
		cands, ok := js.reserveOrCandidates(k)
		if ok {
			return nil
		}
		if len(cands) == 0 {
			break
		}
		busy := js.jobs.Busy()
		victim, ok := js.takeVictim(cands, busy)
		if !ok {
			continue // used meanwhile: look again
		}
		if victim.tj == nil {
			return nil // a place came free meanwhile
		}
		idle := time.Since(victim.used)
		js.end(victim.k, victim.tj)
		js.log.Info("jail reclaimed: the bound of live jails (--max-jails) is reached; the least recently used idle jail makes room",
			"tenant", victim.k.Tenant, "thread", victim.k.Thread, "idle", idle.Round(time.Millisecond),
			"for_tenant", k.Tenant, "for_thread", k.Thread, "max_jails", js.max)
		js.events.Emit(api.Event{Type: api.EventJailReclaimed, Tenant: victim.k.Tenant, Thread: victim.k.Thread,
			Message: fmt.Sprintf("This server runs %d jails, its limit (--max-jails), and another thread needed one: this jail, the least recently used with nothing running in it, was stopped. The next command starts a new one.", js.max)})
		return nil
	}
	js.log.Warn("refused: jail bound", "tenant", k.Tenant, "thread", k.Thread, "max_jails", js.max)
	return &BoundError{max: js.max}
}

// BoundError refuses a jail past the bound with every jail busy. It
// matches api.ErrUnavailable (503): the call works once a command ends.
type BoundError struct{ max int }

func (e *BoundError) Error() string {
	return fmt.Sprintf("This server runs %d jails, its limit (--max-jails), and a command, job or terminal runs in every one; try again once one ends, or raise the limit.", e.max)
}

func (e *BoundError) Is(target error) bool { return target == api.ErrUnavailable }

// reserveOrCandidates takes a place for a jail of k if one is free under
// the bound (true); else it returns the jails that look idle (no
// command registered, not held, not being restored), least recently used
// first.
func (js *Jails) reserveOrCandidates(k meta.ThreadKey) ([]jailCandidate, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.jails)+js.starting < js.max {
		js.starting++
		return nil, true
	}
	running := js.runningLocked()
	var cands []jailCandidate
	for jk, tj := range js.jails {
		if jk == k || !js.idleLocked(jk, tj, running) {
			continue
		}
		cands = append(cands, jailCandidate{jk, tj, tj.uses})
	}
	slices.SortFunc(cands, func(a, b jailCandidate) int { return a.tj.used.Compare(b.tj.used) })
	return cands, false
}

// idleLocked says whether tj, k's jail, looks idle; running holds the
// threads with a registered command. js.mu must be held.
func (js *Jails) idleLocked(k meta.ThreadKey, tj *ThreadJail, running map[meta.ThreadKey]bool) bool {
	if tj.holds > 0 || running[k] {
		return false
	}
	_, restoring := js.restoring[k]
	return !restoring
}

// victim is the jail reserve stops, and when it was last used; tj is
// nil when a place came free without one.
type victim struct {
	k    meta.ThreadKey
	tj   *ThreadJail
	used time.Time
}

// takeVictim takes a place: a free one if the jails went below the bound
// meanwhile, else that of the first of cands that is not busy (its jobs)
// and still idle and unused since reserveOrCandidates saw it; that jail
// is taken out of the set for the caller to close. It says false if none
// is.
func (js *Jails) takeVictim(cands []jailCandidate, busy map[meta.ThreadKey]bool) (victim, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if len(js.jails)+js.starting < js.max {
		js.starting++
		return victim{}, true
	}
	running := js.runningLocked()
	for _, c := range cands {
		if busy[c.k] || js.jails[c.k] != c.tj || c.tj.uses != c.uses || !js.idleLocked(c.k, c.tj, running) {
			continue
		}
		delete(js.jails, c.k)
		js.starting++
		return victim{c.k, c.tj, c.tj.used}, true
	}
	return victim{}, false
}

// unreserve gives back a place reserve took, for a jail that did not
// start.
func (js *Jails) unreserve() {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.starting--
}

// Live returns the jails alive (or starting) and their bound.
func (js *Jails) Live() (live, max int) {
	js.mu.Lock()
	defer js.mu.Unlock()
	return len(js.jails) + js.starting, js.max
}

// runningLocked returns the threads with a registered command. js.mu
// must be held.
func (js *Jails) runningLocked() map[meta.ThreadKey]bool {
	running := make(map[meta.ThreadKey]bool, len(js.execs))
	for _, c := range js.execs {
		running[c.Thread()] = true
	}
	return running
}
