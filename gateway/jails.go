package gateway

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
)

// The threads' jails (package jail): one per bound thread, made at its
// first command and closed when the thread is closed or deleted, when a
// fence takes it down, when it is idle (idle.go), when the bound of live
// jails needs its place (jailbound.go), or when the gateway stops. The
// commands running in them are kept by id (exec.go), for their input and
// size.

// jailSet is the jails of the threads and the commands running in them.
type jailSet struct {
	mu sync.Mutex
	// closed is set by Close once it ended every jail: no jail is added
	// after it.
	closed bool
	// jails are the threads' sandboxes, made at their first command.
	jails map[meta.ThreadKey]*threadJail
	// execs are the running commands by id, for their input and size;
	// execSeq numbers them.
	execs   map[string]*runningExec
	execSeq uint64
	// endedExecs remembers the newest endedExecsKept commands that ended
	// (endedOrder: their ids, oldest first), so that a signal to one is
	// told it ended (409) rather than that it never was (404).
	endedExecs map[string]endedExec
	endedOrder []string
	// restoring holds the threads whose workspace is being restored
	// (checkpoints.go), with why: no command starts in them.
	restoring map[meta.ThreadKey]string
	// max bounds the jails alive, counting the starting ones being
	// started (jailbound.go); max is set at Start, never changed.
	max      int
	starting int
}

// hold returns k's jail (nil if none) and the settings it runs with, and
// holds it: no bound or idle reclaim stops it until unhold (the caller is
// about to start a command in it, or wait on it).
func (js *jailSet) hold(k meta.ThreadKey) (*threadJail, meta.Settings) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	if tj == nil {
		return nil, meta.Settings{}
	}
	tj.used = time.Now()
	tj.holds++
	tj.uses++
	return tj, tj.settings
}

// unhold gives back a hold of tj (hold, or jailFor).
func (js *jailSet) unhold(tj *threadJail) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj.holds--
	tj.used = time.Now()
}

// get returns k's jail (nil if none) and the settings it runs with.
func (js *jailSet) get(k meta.ThreadKey) (*threadJail, meta.Settings) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	if tj == nil {
		return nil, meta.Settings{}
	}
	tj.used = time.Now()
	return tj, tj.settings
}

// settings returns the settings tj runs with.
func (js *jailSet) settings(tj *threadJail) meta.Settings {
	js.mu.Lock()
	defer js.mu.Unlock()
	return tj.settings
}

// setSettings records that tj runs with s now.
func (js *jailSet) setSettings(tj *threadJail, s meta.Settings) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj.settings = s
}

// add keeps tj as k's jail, in the place reserve took for it, held for
// the caller (unhold), or refuses it with ErrClosed once Close ended the
// jails: the caller then closes tj.
func (js *jailSet) add(k meta.ThreadKey, tj *threadJail) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.starting-- // its place, taken by reserve
	if js.closed {
		return api.ErrClosed
	}
	tj.used = time.Now()
	tj.holds++ // the caller's, as hold gives
	tj.uses++
	js.jails[k] = tj
	return nil
}

// remove forgets tj as k's jail, if it still is.
func (js *jailSet) remove(k meta.ThreadKey, tj *threadJail) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.jails[k] == tj {
		delete(js.jails, k)
	}
}

// take forgets k's jail and returns it (nil if none), for the caller to
// close.
func (js *jailSet) take(k meta.ThreadKey) *threadJail {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	delete(js.jails, k)
	return tj
}

// closeAll forgets every jail, refuses new ones from now on, and returns
// them for the caller to close.
func (js *jailSet) closeAll() map[meta.ThreadKey]*threadJail {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.closed = true
	all := js.jails
	js.jails = make(map[meta.ThreadKey]*threadJail)
	return all
}

// startExec registers a running command and returns its id, or refuses
// it while its thread's workspace is being restored.
func (js *jailSet) startExec(re *runningExec) (string, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if why, ok := js.restoring[re.key]; ok {
		return "", restoringError(why)
	}
	js.execSeq++
	id := "exec-" + strconv.FormatUint(js.execSeq, 10)
	js.execs[id] = re
	return id, nil
}

// restoringError refuses a command while its thread is being restored.
func restoringError(why string) error {
	return call.Refuse(api.ErrBusy, fmt.Sprintf("No command can start now: %s. Run it again once the restore is done.", why))
}

// beginRestore marks k as being restored (why says how), so that no
// command starts in it, and returns the ids of its commands that run.
// A command registers itself before it checks the mark, and a restore
// marks before it counts: one of the two sees the other. Call endRestore
// when done.
func (js *jailSet) beginRestore(k meta.ThreadKey, why string) []string {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.restoring == nil {
		js.restoring = make(map[meta.ThreadKey]string)
	}
	js.restoring[k] = why
	var ids []string
	for id, re := range js.execs {
		if re.key == k {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// endRestore lifts beginRestore's mark.
func (js *jailSet) endRestore(k meta.ThreadKey) {
	js.mu.Lock()
	defer js.mu.Unlock()
	delete(js.restoring, k)
}

// restoringWhy says why k is being restored, if it is.
func (js *jailSet) restoringWhy(k meta.ThreadKey) (string, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	why, ok := js.restoring[k]
	return why, ok
}

// endedExecsKept bounds the ended commands a gateway remembers (a few
// dozen bytes each).
const endedExecsKept = 1024

// endedExec is what a gateway remembers of a command that ended: its
// thread, and the job it became if it moved to the background.
type endedExec struct {
	key meta.ThreadKey
	job string
}

// endExec forgets running command id, remembers it ended, and returns it
// (nil if unknown).
func (js *jailSet) endExec(id string) *runningExec {
	js.mu.Lock()
	defer js.mu.Unlock()
	re := js.execs[id]
	if re == nil {
		return nil
	}
	delete(js.execs, id)
	if tj := js.jails[re.key]; tj != nil {
		tj.used = time.Now()
	}
	if js.endedExecs == nil {
		js.endedExecs = make(map[string]endedExec)
	}
	js.endedExecs[id] = endedExec{key: re.key, job: re.job}
	js.endedOrder = append(js.endedOrder, id)
	if len(js.endedOrder) > endedExecsKept {
		delete(js.endedExecs, js.endedOrder[0])
		js.endedOrder = js.endedOrder[1:]
	}
	return re
}

// endedExecOf returns what is remembered of ended command id.
func (js *jailSet) endedExecOf(id string) (endedExec, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	e, ok := js.endedExecs[id]
	return e, ok
}

// exec returns running command id, or nil.
func (js *jailSet) exec(id string) *runningExec {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.execs[id]
}

// jailFor returns k's jail, held (the caller unholds it once its
// command is registered, or it is done with it), starting it at the
// thread's first command with the settings of its binding b; at the bound
// of live jails, the least recently used idle one is stopped to make
// room, or the call refused (reserveJail). The workspace's root is given
// to the jail's user, whose commands otherwise could not write it. The
// thread lock of k must be held.
func (g *Gateway) jailFor(ctx context.Context, k meta.ThreadKey, b meta.Binding) (*threadJail, error) {
	tj, _ := g.jails.hold(k)
	if tj != nil {
		dead := tj.jail.Err()
		if dead == nil {
			return tj, nil
		}
		g.jails.unhold(tj)
		g.replaceDeadJail(k, tj, dead)
	}
	s := b.Settings
	_, mountPath, err := g.threadPaths(k)
	if err != nil {
		return nil, err
	}
	root, err := g.rootOf(b)
	if err != nil {
		return nil, err
	}
	// A workspace bound before binds gave it away is given now.
	if err := giveToJailUser(root); err != nil {
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	cfg := g.jailConfig(s, mountPath)
	if err := g.reserveJail(k); err != nil {
		return nil, err
	}
	started := time.Now()
	j, err := jail.Start(ctx, cfg)
	g.metrics.JailStarted(time.Since(started), err)
	if err != nil {
		g.jails.unreserve()
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	// Its commands act as their runs in every mount of the gateway.
	unregister, err := g.hub.RegisterJail(j.InitPid(), j.RunOf)
	if err != nil {
		j.Close()
		g.jails.unreserve()
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	tj = &threadJail{jail: j, unregister: unregister, settings: cloneSettings(s)}
	if err := g.jails.add(k, tj); err != nil {
		// Close ended every jail already: this one would outlive it.
		tj.close()
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	g.log.Info("jail started", "tenant", k.Tenant, "thread", k.Thread, "network", cfg.Network, "limits", j.Limits)
	return tj, nil
}

// replaceDeadJail forgets k's jail tj, whose init died (killed from the
// host, or out of memory): its commands and jobs ended with it (137), and
// no command can start in it. It is closed (its cgroup goes), and the
// thread gets a new jail at this command: a thread never stays without
// one. The note goes to the log and the event stream. The thread lock of
// k must be held.
func (g *Gateway) replaceDeadJail(k meta.ThreadKey, tj *threadJail, dead error) {
	g.jails.remove(k, tj)
	tj.close()
	g.log.Warn("jail's init died: its commands ended; starting a new jail", "tenant", k.Tenant, "thread", k.Thread, "error", dead)
	g.emit(api.Event{Type: api.EventJailReplaced, Tenant: k.Tenant, Thread: k.Thread,
		Message: "The jail of this thread ended unexpectedly, with every command and job in it. The next command starts a new jail."})
}

// threadJail is a thread's running jail.
type threadJail struct {
	jail       *jail.Jail
	unregister func() // forgets it in the hub's actors
	// settings are the thread's, as its jail was started with them or
	// last changed (resettle); guarded by jailSet.mu.
	settings meta.Settings
	// used is when a command last found the jail or ended in it (idle.go);
	// guarded by jailSet.mu.
	used time.Time
	// holds counts the calls that found the jail and have not registered
	// their command yet (hold, unhold): a held jail is never stopped to
	// make room or for being idle. uses counts the holds ever taken, so
	// that the bound sees a jail used while it looked away
	// (jailbound.go). Guarded by jailSet.mu.
	holds int
	uses  uint64
}

func (tj *threadJail) close() {
	tj.unregister()
	tj.jail.Close()
}

// threadJail returns the jail of a thread and the thread's settings,
// binding the thread and starting its jail if need be. A running jail means
// a bound, mounted thread (closing or deleting it ends the jail first), so
// a warm command costs no look-up in the store. The jail is held (hold):
// the caller calls release once its command is registered (a running
// command or job keeps the jail from being stopped from then on), or when
// it gives up; release is nil with an error.
func (g *Gateway) threadJail(ctx context.Context, tenant, thread string) (j *jail.Jail, s meta.Settings, k meta.ThreadKey, release func(), err error) {
	k, err = call.ThreadKey(tenant, thread)
	if err != nil {
		return nil, meta.Settings{}, k, nil, err
	}
	tj, s := g.jails.hold(k)
	// A jail whose init died is replaced under the thread's lock
	// (jailFor); a thread closed while its jobs run is bound again there.
	warm := tj != nil && tj.jail.Err() == nil && !g.jobs.closing(k)
	if warm {
		// A warm jail still needs the thread's pin (a map look-up while
		// the lease holds).
		if err := g.hosts.Claim(ctx, k, nil); err != nil {
			g.jails.unhold(tj)
			return nil, s, k, nil, err
		}
		return tj.jail, s, k, func() { g.jails.unhold(tj) }, nil
	}
	if tj != nil {
		g.jails.unhold(tj)
	}
	unlock, err := g.threads.locks.lock(ctx, k)
	if err != nil {
		return nil, s, k, nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	defer unlock()
	b, err := g.bindLocked(ctx, k, nil)
	if err != nil {
		return nil, s, k, nil, err
	}
	tj, err = g.jailFor(ctx, k, b)
	if err != nil {
		return nil, s, k, nil, err
	}
	return tj.jail, g.jails.settings(tj), k, func() { g.jails.unhold(tj) }, nil
}

// closeJail ends k's jail, if it has one, and every command in it.
func (g *Gateway) closeJail(k meta.ThreadKey) {
	if tj := g.jails.take(k); tj != nil {
		tj.close()
	}
}

// closeJails ends every jail, at shutdown, and refuses new ones.
func (g *Gateway) closeJails() {
	for _, tj := range g.jails.closeAll() {
		tj.close()
	}
}

// giveToJailUser makes the workspace folder root its jail's user's, unless
// it is someone's other than root's already.
func giveToJailUser(root string) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		return fmt.Errorf("give the workspace to its user: %w", err)
	}
	if st.Uid != 0 {
		return nil
	}
	if err := os.Lchown(root, jail.NobodyID, jail.NobodyID); err != nil {
		return fmt.Errorf("give the workspace to its user: %w", err)
	}
	return nil
}
