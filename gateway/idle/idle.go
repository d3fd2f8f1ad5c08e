// Package idle is the room of the idle reclaim. A thread an agent stopped
// using still holds its jail (an init, a cgroup, their memory) and its
// mount. The reclaimer, a goroutine this room owns (Start, Close), looks
// every idleTick:
//
//   - a jail in which no command or job ran for the thread's jail idle
//     time (Config.JailIdle, or its settings' JailIdleSeconds) is stopped.
//     The thread stays bound and mounted; its next command starts a new
//     jail. Nothing runs in it by construction: the jail is taken out of
//     the jail set, under its lock, only while no command is registered
//     and it was last found longer ago than the idle time, and only when
//     no job of the thread runs (package jails, ReclaimIdle).
//   - a thread nothing used for its close idle time (commands, jobs,
//     requests through its mount, calls that change it) is closed, as by
//     POST .../close: its mount goes, its folder and record stay.
//
// Both are logged, and told as events (jail.reclaimed, thread.closed).
//
// A command that waited longer than the jail idle time between finding
// its jail and starting in it would find the jail gone (exit 137); idle
// times are minutes.
//
// The reclaimer owns its goroutine and what it remembers of each thread
// between looks (used by that goroutine alone: no lock); it calls the
// threads, the jails and the jobs through small interfaces (Config), and
// takes their locks only through them, one at a time.
package idle

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/jails"
	"warren/gateway/threads"
	"warren/meta"
)

// idleTick is how often the reclaimer looks.
const idleTick = 500 * time.Millisecond

// threadUse is what the reclaimer remembers of a mounted thread.
type threadUse struct {
	requests uint64    // its mount's requests when last seen
	at       time.Time // when it was last seen used
	// closeIdle is its close idle time (0: never), as its settings said
	// at settingsAt; read again every settingsEvery, and before a close.
	closeIdle  time.Duration
	settingsAt time.Time
}

// settingsEvery is how often the reclaimer reads a thread's settings
// again.
const settingsEvery = time.Minute

// Config is what the reclaimer needs.
type Config struct {
	Threads Threads
	Jails   Jails
	Jobs    Jobs
	Store   meta.Store
	// CloseIdle is the daemon's close idle time (0: never, unless a
	// thread's settings say otherwise).
	CloseIdle time.Duration
	Logger    hclog.Logger
}

// Threads is what the reclaimer calls of the threads (package threads).
type Threads interface {
	Uses() []threads.Use
	CloseWith(ctx context.Context, tenant, thread, why string) (api.ThreadInfo, error)
}

// Jails is what the reclaimer calls of the jails (package jails).
type Jails interface {
	ReclaimIdle()
	LastUsed(k meta.ThreadKey) (time.Time, bool)
	Runs(k meta.ThreadKey) bool
}

// Jobs is what the reclaimer calls of the jobs (package jobs).
type Jobs interface {
	Running(k meta.ThreadKey) int
}

// Reclaimer is the idle reclaim's goroutine. Start starts one; Close
// stops it and waits for it.
type Reclaimer struct {
	cfg  Config
	log  hclog.Logger
	stop context.CancelFunc
	done chan struct{} // closed when the goroutine returned
}

// Start starts the reclaimer; call Close when finished.
func Start(cfg Config) *Reclaimer {
	ctx, stop := context.WithCancel(context.Background())
	r := &Reclaimer{cfg: cfg, log: cfg.Logger, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(idleTick)
		defer t.Stop()
		uses := make(map[meta.ThreadKey]*threadUse)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.cfg.Jails.ReclaimIdle()
			r.closeIdleThreads(ctx, uses)
		}
	}()
	return r
}

// Close stops the reclaimer and waits for it.
func (r *Reclaimer) Close() {
	r.stop()
	<-r.done
}

// closeIdleThreads closes the mounted threads unused past their close
// idle time. uses carries what it saw from one look to the next.
func (r *Reclaimer) closeIdleThreads(ctx context.Context, uses map[meta.ThreadKey]*threadUse) {
	now := time.Now()
	ms := r.cfg.Threads.Uses()

	seen := make(map[meta.ThreadKey]bool, len(ms))
	for _, m := range ms {
		seen[m.Key] = true
		u := uses[m.Key]
		if u == nil {
			u = &threadUse{requests: m.Requests, at: now}
			uses[m.Key] = u
		}
		if m.Requests != u.requests {
			u.requests, u.at = m.Requests, now
		}
		if m.Touched.After(u.at) {
			u.at = m.Touched
		}
		if used, ok := r.cfg.Jails.LastUsed(m.Key); ok && used.After(u.at) {
			u.at = used
		}
		if r.cfg.Jobs.Running(m.Key) > 0 || r.cfg.Jails.Runs(m.Key) {
			u.at = now
			continue
		}
		if now.Sub(u.settingsAt) > settingsEvery {
			if !r.readCloseIdle(ctx, m.Key, u) {
				continue
			}
		}
		if u.closeIdle == 0 || now.Sub(u.at) < u.closeIdle {
			continue
		}
		// Its settings may have changed since: read them again first.
		if !r.readCloseIdle(ctx, m.Key, u) || u.closeIdle == 0 || now.Sub(u.at) < u.closeIdle {
			continue
		}
		why := fmt.Sprintf("closed after %v without use; the folder is kept", now.Sub(u.at).Round(time.Second))
		if _, err := r.cfg.Threads.CloseWith(ctx, m.Key.Tenant, m.Key.Thread, why); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("close an idle thread", "tenant", m.Key.Tenant, "thread", m.Key.Thread, "error", err)
			}
			u.at = now // try again after another idle time, not at every tick
			continue
		}
		r.log.Info("thread closed: idle", "tenant", m.Key.Tenant, "thread", m.Key.Thread, "idle", now.Sub(u.at).Round(time.Second))
		delete(uses, m.Key)
	}
	for k := range uses {
		if !seen[k] {
			delete(uses, k)
		}
	}
}

// readCloseIdle reads thread k's close idle time into u; false if its
// binding could not be read.
func (r *Reclaimer) readCloseIdle(ctx context.Context, k meta.ThreadKey, u *threadUse) bool {
	b, err := r.cfg.Store.GetBinding(ctx, k)
	if err != nil {
		return false
	}
	u.closeIdle = jails.IdleOf(r.cfg.CloseIdle, b.Settings.CloseIdleSeconds, 0)
	u.settingsAt = time.Now()
	return true
}
