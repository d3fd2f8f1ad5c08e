package jails

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/gateway/threads"
	"warren/jail"
	"warren/meta"
)

// The threads' jails (package jail): one per bound thread, made at its
// first command and closed when the thread is closed or deleted, when a
// fence takes it down, when it is idle (idle.go), when the bound of live
// jails needs its place (bound.go), or when the gateway stops. The
// commands running in them are kept by id (the jobs room's exec), for
// their input and size.

// Jails is the jails of the threads and the commands running in them.
// New makes it; it starts no goroutine of its own (a jail's are the
// jail's, ended by its close), and CloseAll ends every jail.
type Jails struct {
	// Set by New (jobs by SetJobs, ended by AddEnded, base by
	// StartBase, all before the API serves), never changed.
	cfg     Config
	log     hclog.Logger
	threads Threads
	hosts   Hosts
	events  Events
	metrics Metrics
	jobs    Jobs
	// ended are told of every jail's end (AddEnded, before the API
	// serves).
	ended []Ended
	// base is the mount namespace the jails are forked from, without the
	// threads' mounts (jail.Base); nil if it could not be made, and jails
	// then copy the daemon's namespace. Closed by CloseBase once no
	// request runs.
	base *jail.Base

	mu sync.Mutex
	// closed is set by CloseAll once it ended every jail: no jail is
	// added after it.
	closed bool
	// jails are the threads' sandboxes, made at their first command.
	jails map[meta.ThreadKey]*ThreadJail
	// execs are the running commands by id, for their input and size;
	// execSeq numbers them.
	execs   map[string]Command
	execSeq uint64
	// endedExecs remembers the newest endedExecsKept commands that ended
	// (endedOrder: their ids, oldest first), so that a signal to one is
	// told it ended (409) rather than that it never was (404).
	endedExecs map[string]EndedExec
	endedOrder []string
	// restoring holds the threads whose workspace is being restored
	// (checkpoints.go), with why: no command starts in them.
	restoring map[meta.ThreadKey]string
	// max bounds the jails alive, counting the starting ones being
	// started (bound.go); max is set by New, never changed.
	max      int
	starting int
}

// Config is what the jails need of the daemon: the jails' defaults (a
// thread's settings win), their bounds, and the rooms they call.
type Config struct {
	// Binary, Rlimits, Network, MemoryBytes, MaxProcs and CPUMillis are
	// the daemon's Config.Jail*: the jails' defaults.
	Binary      string
	Rlimits     bool
	Network     string
	MemoryBytes int64
	MaxProcs    int
	CPUMillis   int
	// Path is the commands' PATH in a jail on the host's folders (the
	// daemon's Config.JailPath); "" means jail.Path. See Env.
	Path string
	// Idle is the daemon's jail idle time (Config.JailIdle; see IdleOf).
	Idle time.Duration
	// Max bounds the jails alive (Config.MaxJails, or the machine's).
	Max int
	// CheckRun refuses a run id that could not be told apart in logs.
	CheckRun func(run string) error
	// Hub is told of every jail, so that its commands act as their runs
	// in every mount.
	Hub     *fs.Hub
	Threads Threads
	Hosts   Hosts
	// Networks gives each jail the network its settings ask for; nil
	// gives none but the jail's own (tests of this room alone).
	Networks Networks
	// Images gives the root of a jail whose thread names an image;
	// nil refuses such a jail (tests of this room alone).
	Images  Images
	Events  Events
	Metrics Metrics
	Logger  hclog.Logger
}

// Networks is what the jails call of the network room (package
// gateway/network): a jail's name server, its network once it started,
// and its new rules when a bind changes them.
type Networks interface {
	Nameserver(mode string) string
	Attach(ctx context.Context, k meta.ThreadKey, j *jail.Jail, s meta.Settings, mode string) error
	Apply(k meta.ThreadKey, j *jail.Jail, old, s meta.Settings) error
}

// Images is what the jails call of the images room (package
// gateway/images): the root of the image a thread is pinned to, pulled
// again by digest if this server's store lacks it.
type Images interface {
	JailImage(ctx context.Context, ref, digest string) (*jail.Image, error)
}

// Threads is what the jails call of the threads: the thread lock, a bind
// under it, and the thread's folders.
type Threads interface {
	Lock(ctx context.Context, k meta.ThreadKey) (unlock func(), err error)
	BindLocked(ctx context.Context, k meta.ThreadKey, s *meta.Settings) (meta.Binding, error)
	Paths(k meta.ThreadKey) (root, mountPath string, err error)
	RootOf(b meta.Binding) (string, error)
	// Home is the thread's home folder, made if it is missing; the
	// thread lock of k is held.
	Home(k meta.ThreadKey, b meta.Binding) (string, error)
}

// Hosts is what the jails call of the hosts: a warm jail's thread is
// pinned to this gateway (a map look-up while the lease holds).
type Hosts interface {
	Claim(ctx context.Context, k meta.ThreadKey, b *meta.Binding) error
}

// Jobs is what the jails ask of the jobs room, which imports them: the
// bound and the idle reclaim stop no jail whose thread's jobs run, and
// a thread closed while its jobs run is bound again before a command.
type Jobs interface {
	// Busy says which threads run jobs, or are starting or moving one,
	// or were closed while jobs ran.
	Busy() map[meta.ThreadKey]bool
	// Closing says whether k was closed while its jobs run.
	Closing(k meta.ThreadKey) bool
}

// Events is where the jails tell what they did (jail.replaced,
// jail.reclaimed).
type Events interface{ Emit(api.Event) }

// Metrics counts the jails' starts.
type Metrics interface {
	JailStarted(took time.Duration, err error)
}

// Command is a command running in a jail, registered (StartExec) from
// before it is answered until its stream is done with it (EndExec): the
// jobs room's exec.
type Command interface {
	// Thread is the thread it runs in.
	Thread() meta.ThreadKey
	// Stopping tells it why the gateway is about to end its jail, for
	// the reason of its end (NoteStopping); called under the set's lock.
	Stopping(why string)
	// Job is the job it became, "" if it did not: read when it ends.
	Job() string
}

// New returns the jail set, with no jail yet. Call SetJobs before a
// command runs.
func New(cfg Config) *Jails {
	return &Jails{
		cfg: cfg, log: cfg.Logger, threads: cfg.Threads, hosts: cfg.Hosts, events: cfg.Events, metrics: cfg.Metrics,
		jails: make(map[meta.ThreadKey]*ThreadJail), execs: make(map[string]Command), max: cfg.Max,
	}
}

// SetJobs wires the jobs room in, once it exists; before the API
// serves.
func (js *Jails) SetJobs(j Jobs) { js.jobs = j }

// Ended is a room that holds something of a jail's (the ports' channels
// into it) and lets it go when the jail ends.
type Ended interface {
	// JailEnded is told, with no lock of the set held, that k's jail j
	// ended: closed (the thread closed or deleted, idle, the bound, a
	// restore with force, the gateway's stop) or replaced after its init
	// died. j.Err is not nil from then on.
	JailEnded(k meta.ThreadKey, j *jail.Jail)
}

// AddEnded has e told of every jail's end; before the API serves.
func (js *Jails) AddEnded(e Ended) { js.ended = append(js.ended, e) }

// Acquire returns the jail of a thread, binding the thread and starting
// its jail if need be, as a command's (CommandIn), held: no bound or
// idle reclaim stops it until the caller calls release (nil with an
// error).
func (js *Jails) Acquire(ctx context.Context, tenant, thread string) (j *jail.Jail, k meta.ThreadKey, release func(), err error) {
	j, _, k, release, err = js.thread(ctx, tenant, thread)
	return j, k, release, err
}

// Touch counts a use of k's jail, if it has one (idle.go): something
// outside its commands talks to it (a port's channel).
func (js *Jails) Touch(k meta.ThreadKey) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if tj := js.jails[k]; tj != nil {
		tj.used = time.Now()
	}
}

// hold returns k's jail (nil if none) and the settings it runs with, and
// holds it: no bound or idle reclaim stops it until Unhold (the caller is
// about to start a command in it, or wait on it).
func (js *Jails) hold(k meta.ThreadKey) (*ThreadJail, meta.Settings) {
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

// Unhold gives back a hold of tj (hold, or For).
func (js *Jails) Unhold(tj *ThreadJail) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj.holds--
	tj.used = time.Now()
}

// Get returns k's jail (nil if none) and the settings it runs with; it
// counts as a use (idle.go).
func (js *Jails) Get(k meta.ThreadKey) (*ThreadJail, meta.Settings) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	if tj == nil {
		return nil, meta.Settings{}
	}
	tj.used = time.Now()
	return tj, tj.settings
}

// JailOf returns k's jail, nil if none, without counting it as a use:
// for its figures (the usage call).
func (js *Jails) JailOf(k meta.ThreadKey) *jail.Jail {
	js.mu.Lock()
	tj := js.jails[k]
	js.mu.Unlock()
	if tj == nil {
		return nil
	}
	return tj.jail
}

// Count returns how many jails run.
func (js *Jails) Count() int {
	js.mu.Lock()
	defer js.mu.Unlock()
	return len(js.jails)
}

// settings returns the settings tj runs with.
func (js *Jails) settings(tj *ThreadJail) meta.Settings {
	js.mu.Lock()
	defer js.mu.Unlock()
	return tj.settings
}

// SetSettings records that tj runs with s now.
func (js *Jails) SetSettings(tj *ThreadJail, s meta.Settings) {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj.settings = s
}

// add keeps tj as k's jail, in the place reserve took for it, held for
// the caller (Unhold), or refuses it with ErrClosed once Close ended the
// jails: the caller then closes tj.
func (js *Jails) add(k meta.ThreadKey, tj *ThreadJail) error {
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
func (js *Jails) remove(k meta.ThreadKey, tj *ThreadJail) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.jails[k] == tj {
		delete(js.jails, k)
	}
}

// take forgets k's jail and returns it (nil if none), for the caller to
// close.
func (js *Jails) take(k meta.ThreadKey) *ThreadJail {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.jails[k]
	delete(js.jails, k)
	return tj
}

// closeAll forgets every jail, refuses new ones from now on, and returns
// them for the caller to close.
func (js *Jails) closeAll() map[meta.ThreadKey]*ThreadJail {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.closed = true
	all := js.jails
	js.jails = make(map[meta.ThreadKey]*ThreadJail)
	return all
}

// StartExec registers a running command and returns its id, or refuses
// it while its thread's workspace is being restored.
func (js *Jails) StartExec(c Command) (string, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if why, ok := js.restoring[c.Thread()]; ok {
		return "", RestoringError(why)
	}
	js.execSeq++
	id := "exec-" + strconv.FormatUint(js.execSeq, 10)
	js.execs[id] = c
	return id, nil
}

// RestoringError refuses a command while its thread is being restored.
func RestoringError(why string) error {
	return call.Refuse(api.ErrBusy, fmt.Sprintf("No command can start now: %s. Run it again once the restore is done.", why))
}

// BeginRestore marks k as being restored (why says how), so that no
// command starts in it, and returns the ids of its commands that run.
// A command registers itself before it checks the mark, and a restore
// marks before it counts: one of the two sees the other. Call EndRestore
// when done.
func (js *Jails) BeginRestore(k meta.ThreadKey, why string) []string {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.restoring == nil {
		js.restoring = make(map[meta.ThreadKey]string)
	}
	js.restoring[k] = why
	var ids []string
	for id, c := range js.execs {
		if c.Thread() == k {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// EndRestore lifts BeginRestore's mark.
func (js *Jails) EndRestore(k meta.ThreadKey) {
	js.mu.Lock()
	defer js.mu.Unlock()
	delete(js.restoring, k)
}

// RestoringWhy says why k is being restored, if it is.
func (js *Jails) RestoringWhy(k meta.ThreadKey) (string, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	why, ok := js.restoring[k]
	return why, ok
}

// endedExecsKept bounds the ended commands a gateway remembers (a few
// dozen bytes each).
const endedExecsKept = 1024

// EndedExec is what a gateway remembers of a command that ended: its
// thread, and the job it became if it moved to the background.
type EndedExec struct {
	Thread meta.ThreadKey
	Job    string
}

// EndExec forgets running command id, remembers it ended, and returns it
// (nil if unknown).
func (js *Jails) EndExec(id string) Command {
	js.mu.Lock()
	defer js.mu.Unlock()
	c := js.execs[id]
	if c == nil {
		return nil
	}
	delete(js.execs, id)
	k := c.Thread()
	if tj := js.jails[k]; tj != nil {
		tj.used = time.Now()
	}
	if js.endedExecs == nil {
		js.endedExecs = make(map[string]EndedExec)
	}
	js.endedExecs[id] = EndedExec{Thread: k, Job: c.Job()}
	js.endedOrder = append(js.endedOrder, id)
	if len(js.endedOrder) > endedExecsKept {
		delete(js.endedExecs, js.endedOrder[0])
		js.endedOrder = js.endedOrder[1:]
	}
	return c
}

// Ended returns what is remembered of ended command id.
func (js *Jails) Ended(id string) (EndedExec, bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	e, ok := js.endedExecs[id]
	return e, ok
}

// Exec returns running command id, or nil.
func (js *Jails) Exec(id string) Command {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.execs[id]
}

// NoteStopping tells k's running commands why the gateway is about to
// end their jail (Command.Stopping), so that their ends say why; the
// jobs room tells its jobs (jobs.Jobs.NoteStopping, which calls this).
func (js *Jails) NoteStopping(k meta.ThreadKey, why string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, c := range js.execs {
		if c.Thread() == k {
			c.Stopping(why)
		}
	}
}

// For returns k's jail, held (the caller unholds it once its command is
// registered, or it is done with it), starting it at the thread's first
// command with the settings of its binding b; at the bound of live
// jails, the least recently used idle one is stopped to make room, or the
// call refused (reserve). The workspace's root is given to the jail's
// user, whose commands otherwise could not write it. The thread lock of k
// must be held.
func (js *Jails) For(ctx context.Context, k meta.ThreadKey, b meta.Binding) (*ThreadJail, error) {
	tj, _ := js.hold(k)
	if tj != nil {
		dead := tj.jail.Err()
		if dead == nil {
			return tj, nil
		}
		js.Unhold(tj)
		js.replaceDead(k, tj, dead)
	}
	s := b.Settings
	_, mountPath, err := js.threads.Paths(k)
	if err != nil {
		return nil, err
	}
	root, err := js.threads.RootOf(b)
	if err != nil {
		return nil, err
	}
	// A workspace bound before binds gave it away is given now.
	if err := jail.GiveWorkspace(root); err != nil {
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	home, err := js.threads.Home(k, b)
	if err != nil {
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	cfg := js.JailConfig(s, mountPath, home)
	if s.Image != "" {
		if js.cfg.Images == nil {
			return nil, fmt.Errorf("jail for %s: %w: this server has no image store for the image %s", call.KeyName(k), api.ErrInvalid, s.Image)
		}
		if cfg.Image, err = js.cfg.Images.JailImage(ctx, s.Image, s.ImageDigest); err != nil {
			return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
		}
	}
	if err := js.reserve(k); err != nil {
		return nil, err
	}
	started := time.Now()
	j, err := jail.Start(ctx, cfg)
	js.metrics.JailStarted(time.Since(started), err)
	if err != nil {
		js.unreserve()
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	// Its commands act as their runs in every mount of the gateway.
	unregister, err := js.cfg.Hub.RegisterJail(j.InitPid(), j.RunOf)
	if err != nil {
		j.Close()
		js.unreserve()
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	// Its network, before it runs anything (taken away at its end: the
	// network room is one of the Ended).
	if js.cfg.Networks != nil {
		if err := js.cfg.Networks.Attach(ctx, k, j, s, cfg.Network); err != nil {
			unregister()
			j.Close()
			js.unreserve()
			return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
		}
	}
	tj = &ThreadJail{jail: j, unregister: unregister, settings: threads.CloneSettings(s), image: cfg.Image}
	if err := js.add(k, tj); err != nil {
		// Close ended every jail already: this one would outlive it.
		js.end(k, tj)
		return nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	js.log.Info("jail started", "tenant", k.Tenant, "thread", k.Thread, "network", cfg.Network, "limits", j.Limits)
	return tj, nil
}

// replaceDead forgets k's jail tj, whose init died (killed from the
// host, or out of memory): its commands and jobs ended with it (137), and
// no command can start in it. It is closed (its cgroup goes), and the
// thread gets a new jail at this command: a thread never stays without
// one. The note goes to the log and the event stream. The thread lock of
// k must be held.
func (js *Jails) replaceDead(k meta.ThreadKey, tj *ThreadJail, dead error) {
	js.remove(k, tj)
	js.end(k, tj)
	js.log.Warn("jail's init died: its commands ended; starting a new jail", "tenant", k.Tenant, "thread", k.Thread, "error", dead)
	js.events.Emit(api.Event{Type: api.EventJailReplaced, Tenant: k.Tenant, Thread: k.Thread,
		Message: "The jail of this thread ended unexpectedly, with every command and job in it. The next command starts a new jail."})
}

// ThreadJail is a thread's running jail.
type ThreadJail struct {
	jail       *jail.Jail
	unregister func() // forgets it in the hub's actors
	// settings are the thread's, as its jail was started with them or
	// last changed (SetSettings); guarded by Jails.mu.
	settings meta.Settings
	// image is the image the jail runs on, nil for the host-folder root:
	// its variables join every command's.
	image *jail.Image
	// used is when a command last found the jail or ended in it (idle.go);
	// guarded by Jails.mu.
	used time.Time
	// holds counts the calls that found the jail and have not registered
	// their command yet (hold, Unhold): a held jail is never stopped to
	// make room or for being idle. uses counts the holds ever taken, so
	// that the bound sees a jail used while it looked away
	// (bound.go). Guarded by Jails.mu.
	holds int
	uses  uint64
}

// Jail is the jail itself.
func (tj *ThreadJail) Jail() *jail.Jail { return tj.jail }

// end closes k's jail tj, taken out of the set, and then tells the
// rooms that hang on it (Ended). Every jail the set ends goes through it.
func (js *Jails) end(k meta.ThreadKey, tj *ThreadJail) {
	tj.close()
	for _, e := range js.ended {
		e.JailEnded(k, tj.jail)
	}
}

func (tj *ThreadJail) close() {
	tj.unregister()
	tj.jail.Close()
}

// thread returns the jail of a thread and the thread's settings,
// binding the thread and starting its jail if need be. A running jail means
// a bound, mounted thread (closing or deleting it ends the jail first), so
// a warm command costs no look-up in the store. The jail is held (hold):
// the caller calls release once its command is registered (a running
// command or job keeps the jail from being stopped from then on), or when
// it gives up; release is nil with an error.
func (js *Jails) thread(ctx context.Context, tenant, thread string) (j *jail.Jail, s meta.Settings, k meta.ThreadKey, release func(), err error) {
	k, err = call.ThreadKey(tenant, thread)
	if err != nil {
		return nil, meta.Settings{}, k, nil, err
	}
	tj, s := js.hold(k)
	// A jail whose init died is replaced under the thread's lock
	// (For); a thread closed while its jobs run is bound again there.
	warm := tj != nil && tj.jail.Err() == nil && !js.jobs.Closing(k)
	if warm {
		// A warm jail still needs the thread's pin (a map look-up while
		// the lease holds).
		if err := js.hosts.Claim(ctx, k, nil); err != nil {
			js.Unhold(tj)
			return nil, s, k, nil, err
		}
		return tj.jail, s, k, func() { js.Unhold(tj) }, nil
	}
	if tj != nil {
		js.Unhold(tj)
	}
	unlock, err := js.threads.Lock(ctx, k)
	if err != nil {
		return nil, s, k, nil, fmt.Errorf("jail for %s: %w", call.KeyName(k), err)
	}
	defer unlock()
	b, err := js.threads.BindLocked(ctx, k, nil)
	if err != nil {
		return nil, s, k, nil, err
	}
	tj, err = js.For(ctx, k, b)
	if err != nil {
		return nil, s, k, nil, err
	}
	return tj.jail, js.settings(tj), k, func() { js.Unhold(tj) }, nil
}

// CloseJail ends k's jail, if it has one, and every command in it.
func (js *Jails) CloseJail(k meta.ThreadKey) {
	if tj := js.take(k); tj != nil {
		js.end(k, tj)
	}
}

// CloseAll ends every jail, at shutdown, and refuses new ones.
func (js *Jails) CloseAll() {
	for k, tj := range js.closeAll() {
		js.end(k, tj)
	}
}
