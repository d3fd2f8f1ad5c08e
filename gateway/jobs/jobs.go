package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/jails"
	"warren/jail"
	"warren/meta"
)

// Background jobs. A job is a command of a thread's jail that the client
// does not wait for: spawn answers at once with its id, bash-N, numbered
// per thread by the store, so an id never comes back, across restarts and
// hosts. The gateway runs it like an exec, keeps the newest 1 MiB of its
// output, of each stream and of both merged (jobstreams.go), records it in
// the store when it starts and when it ends, and tells the event stream
// about both and about its output.
//
// A thread runs at most maxJobs jobs at once on this gateway (its settings,
// else Config.MaxJobs, else 8); one more is refused, and so is moving a
// running exec to the background at the limit. A job is its command's whole
// process tree (jail/tree_linux.go): stopping it sends SIGTERM to every
// process of the tree, then SIGKILL after a grace period; any other signal
// reaches the same processes (signals.go).
//
// The store is the list: it shows jobs of other hosts and of earlier runs
// of this gateway too, with running true only for the jobs this gateway
// runs now. The output of a job is kept only here, while its thread is
// bound: the running jobs and the last endedJobsKept ended ones.

// Limits of jobs.
const (
	// DefaultStopGrace is how long a stopped job has between SIGTERM and
	// SIGKILL.
	DefaultStopGrace = 5 * time.Second
	maxStopGrace     = 5 * time.Minute
	// endedJobsKept bounds the ended jobs of a thread whose output stays
	// readable.
	endedJobsKept = 16
	// jobEventChunk bounds the output carried by one job.output event;
	// longer writes become several events.
	jobEventChunk = 16 << 10
	// jobReadBytes is how much of a job's output is read at once, and
	// jobReadPause how long a short read waits for more (jobWriter.ReadFrom).
	// A read under jobReadShort found the pipe nearly empty (it holds 1
	// MiB, or 64 KiB where the system allows no more).
	jobReadBytes = 1 << 20
	jobReadShort = 64 << 10
	jobReadPause = 200 * time.Microsecond
	// RecordTimeout bounds the store writes of a job's start and end,
	// which do not belong to any request.
	RecordTimeout = 30 * time.Second
)

// ID names job seq.
func ID(seq uint64) string { return "bash-" + strconv.FormatUint(seq, 10) }

// parseJobID is the inverse of ID.
func parseJobID(id string) (uint64, error) {
	n, ok := strings.CutPrefix(id, "bash-")
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil || seq == 0 || ID(seq) != id {
		return 0, fmt.Errorf("%w: %s is not a job id (bash-N)", api.ErrInvalid, call.Quote(id))
	}
	return seq, nil
}

// newInstance names one run of a gateway process, so a restarted host
// tells the jobs of its former runs from its own.
func newInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Jobs is the background jobs this gateway runs or ran, by thread, and
// the commands of its exec calls (exec.go), which may become jobs. New
// makes it; Close refuses new jobs, and Wait waits for every goroutine it
// started (see the package's doc).
type Jobs struct {
	// Set by New, never changed.
	cfg        Config
	log        hclog.Logger
	store      meta.Store
	jails      *jails.Jails
	threadRoom Threads
	events     Events
	metrics    Metrics
	// instance names this run of the gateway in the job records.
	instance string

	mu sync.Mutex
	// closed is set by Close: no job slot is taken after it.
	closed bool
	// threads holds each thread's jobs.
	threads map[meta.ThreadKey]*threadJobs
	// notices are the notes on threads' workspaces that their next
	// command's answer carries (NoteWorkspace); kept past a close, since
	// the model has not had them yet.
	notices map[meta.ThreadKey]string
	// wg counts the job slots taken (spawns and moves under way, running
	// jobs), each until its job's end is recorded, and the closeIdle calls
	// those ends start. A slot is taken only under mu while closed is not
	// set, and Close waits for wg after setting it: no Add follows the
	// Wait but those of closeIdle, made while the ending job still counts.
	wg sync.WaitGroup
}

// Config is what the jobs need of the daemon.
type Config struct {
	// HostID is this gateway's host id ("" for none), and Machine the
	// machine it runs on: both are recorded with each job.
	HostID  string
	Machine string
	// MaxJobs is the daemon's default of a thread's jobs at once (0:
	// DefaultMaxJobs); a thread's settings win.
	MaxJobs int
	Store   meta.Store
	// Jails runs the commands, and keeps the running ones' registry.
	Jails   *jails.Jails
	Threads Threads
	Events  Events
	Metrics Metrics
	// Lookups, if set, says which names a jail without network tried to
	// resolve, for the note of a failed command's end.
	Lookups Lookups
	Logger  hclog.Logger
}

// Threads is what the jobs call of the threads: the take-down of a
// thread closed while its jobs ran, once the last one ended (closeIdle).
type Threads interface {
	TakeDown(ctx context.Context, k meta.ThreadKey, still func(context.Context) bool) (bool, error)
}

// Events is where the jobs tell their starts, output and ends.
type Events interface {
	Emit(api.Event)
	Wants(k meta.ThreadKey) bool
}

// Lookups is what the jobs ask of the network (package network): the
// name a thread's jail without network asked for since a time, if it did,
// and the networks a thread may be given.
type Lookups interface {
	TriedToResolve(k meta.ThreadKey, since time.Time) (name string, ok bool)
	Modes() []string
}

// Metrics counts the commands and jobs.
type Metrics interface {
	ExecEnded(took time.Duration)
	JobStarted()
	JobEnded(total, dropped int64)
}

// New returns the job set, with no job yet.
func New(cfg Config) *Jobs {
	return &Jobs{
		cfg: cfg, log: cfg.Logger, store: cfg.Store, jails: cfg.Jails, threadRoom: cfg.Threads,
		events: cfg.Events, metrics: cfg.Metrics, instance: newInstance(),
		threads: make(map[meta.ThreadKey]*threadJobs),
		notices: make(map[meta.ThreadKey]string),
	}
}

// Busy says which threads run jobs, or are starting or moving one, or
// were closed while jobs ran (jails.Jobs: the bound of live jails and
// the idle reclaim stop none of their jails).
func (js *Jobs) Busy() map[meta.ThreadKey]bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	busy := make(map[meta.ThreadKey]bool, len(js.threads))
	for k, tj := range js.threads {
		if tj.slots > 0 || tj.closing {
			busy[k] = true
		}
	}
	return busy
}

// Closing says whether k was closed while its jobs run.
func (js *Jobs) Closing(k meta.ThreadKey) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.threads[k]
	return tj != nil && tj.closing
}

// Close refuses new job slots from now on; the jobs that run go on
// (their jails' end ends them: see Wait).
func (js *Jobs) Close() {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.closed = true
}

// Wait waits for every job slot taken to be given back (each job's end
// recorded and told) and for the closeIdle calls their ends started.
// Call it after Close and once the jails are ended (that ends the jobs).
func (js *Jobs) Wait() { js.wg.Wait() }

// Count returns how many jobs run (or are being started or moved).
func (js *Jobs) Count() int {
	js.mu.Lock()
	defer js.mu.Unlock()
	n := 0
	for _, tj := range js.threads {
		n += tj.slots
	}
	return n
}

// DefaultMaxJobs is how many background jobs a thread runs at once
// unless its settings or Config.MaxJobs say otherwise.
const DefaultMaxJobs = 8

// maxJobs is how many jobs a thread with settings s runs at once.
func (js *Jobs) maxJobs(s meta.Settings) int {
	switch {
	case s.MaxJobs > 0:
		return s.MaxJobs
	case js.cfg.MaxJobs > 0:
		return js.cfg.MaxJobs
	}
	return DefaultMaxJobs
}

// threadJobs are the jobs of one thread that this gateway runs or ran.
type threadJobs struct {
	slots int             // running jobs, and moves or spawns under way
	jobs  map[uint64]*job // running and kept ended jobs
	ended []uint64        // kept ended jobs, oldest first
	// closing: the thread was closed while jobs ran; its jail and mount
	// go when the last one ends (closeIdle).
	closing bool
}

// job is a job this gateway runs or ran.
type job struct {
	key   meta.ThreadKey
	seq   uint64
	label string
	user  string
	out   *jobStreams

	signals chan syscall.Signal // to its tree, while it runs
	kill    context.CancelFunc  // ends its tree at once
	stdin   *io.PipeWriter      // its input, open until closed or it ends
	stdinMu sync.Mutex          // serializes writes to stdin
	done    chan struct{}       // closed once its end is recorded

	mu  sync.Mutex
	rec meta.Job // as last written to the store (its end set before its output closes); guarded by mu
	// stopping says why the gateway ends the job's jail (NoteStopping),
	// for the note of its end; "" while nobody does. Guarded by mu.
	stopping string
	// killed says a client sent the job SIGKILL (signalJob), for the note
	// of its end; signalled that a client sent it any signal, stopped
	// that it was a stop (stopJob), for its reason. Guarded by mu.
	killed, signalled, stopped bool
	// memory and procs are its jail's limits, for the note of its end,
	// and began when its command started (before it ran), for the name
	// lookups it made.
	memory int64
	procs  int
	began  time.Time
}

// NoteStopping tells k's jobs why the gateway is about to end their jail,
// so that their ends say why (finishJob); the jail must end after it.
func (js *Jobs) NoteStopping(k meta.ThreadKey, why string) {
	js.mu.Lock()
	var jbs []*job
	if tj := js.threads[k]; tj != nil {
		for _, jb := range tj.jobs {
			jbs = append(jbs, jb)
		}
	}
	js.mu.Unlock()
	for _, jb := range jbs {
		jb.mu.Lock()
		jb.stopping = why
		jb.mu.Unlock()
	}
	// The commands running in the foreground too.
	js.jails.NoteStopping(k, why)
}

// NoteStoppingAll is NoteStopping for every thread, at shutdown.
func (js *Jobs) NoteStoppingAll(why string) {
	js.mu.Lock()
	keys := make([]meta.ThreadKey, 0, len(js.threads))
	for k := range js.threads {
		keys = append(keys, k)
	}
	js.mu.Unlock()
	for _, k := range keys {
		js.NoteStopping(k, why)
	}
}

// KilledExit is the exit code of a job that its jail's end killed: the
// kernel ends every process of a pid namespace whose init ends with
// SIGKILL, and a shell says 128 plus the signal.
const KilledExit = 128 + int(syscall.SIGKILL)

// KilledNote says why job id ended with KilledExit: why is what ended its
// jail ("the host restarted").
func KilledNote(id, why string) string {
	return fmt.Sprintf("Background job %s was killed (SIGKILL, exit %d) when %s.", id, KilledExit, why)
}

// exitCode is the job's exit code once its end is recorded, else nil.
func (jb *job) exitCode() *int {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	return jb.rec.ExitCode
}

// info is the API's view of a job this gateway has.
func (jb *job) info() api.JobInfo {
	jb.mu.Lock()
	rec := jb.rec
	jb.mu.Unlock()
	total, dropped := jb.out.Size()
	return api.JobInfo{Job: rec, ID: ID(jb.seq), Running: rec.Running, Ended: !rec.Running, OutputBytes: total, DroppedBytes: dropped}
}

// jobWriter takes one stream of a job's output: it keeps it and tells the
// event stream. The two streams have a writer each, and so a pipe each
// (jail.Cmd): they stay apart.
type jobWriter struct {
	js     *Jobs
	jb     *job
	stream streamID
	pipes  *jobPipes // reads both pipes of a spawned job in order; nil for Write only
}

func (w jobWriter) Write(p []byte) (int, error) {
	n, err := w.jb.out.Write(w.stream, p)
	if err == nil && w.js.events.Wants(w.jb.key) {
		for len(p) > 0 {
			chunk := p[:min(len(p), jobEventChunk)]
			p = p[len(chunk):]
			w.js.events.Emit(api.Event{Type: api.EventJobOutput, Tenant: w.jb.key.Tenant, Thread: w.jb.key.Thread,
				Job: ID(w.jb.seq), Stream: w.stream.String(), Data: string(chunk)})
		}
	}
	return n, err
}

// ReadFrom takes a job's output straight from its pipe (io.Copy prefers
// it to Write): both pipes of a spawned job are read by one goroutine, in
// the order they were written (jobpipes_linux.go). A job that writes in
// small pieces would otherwise wake the gateway once per piece, a few
// microseconds of CPU each: 250,000 times for a gigabyte written 4 KiB at
// a time. After a short read it waits a moment, so the pipes (1 MiB each,
// jail.outputPipeBytes) fill and the next read takes a whole batch;
// output shows at most that moment later.
//
// The batch buffer is jobReadBytes, as big as a ring: held by every job
// while it waits for output, it would double what a job costs the daemon.
// So a job waits for its pipes to be readable with no buffer (the
// runtime's poller), and takes one from a pool shared by all jobs only
// for a read and the copy into its ring.
func (w jobWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.pipes != nil {
		if n, ok := w.pipes.readFrom(w, r); ok {
			return n, nil
		}
	}
	return w.readFromReader(r)
}

// jobReadBufs are the batch buffers of ReadFrom, jobReadBytes each: there
// are about as many as jobs reading at the same moment, not as jobs.
var jobReadBufs = sync.Pool{New: func() any {
	b := make([]byte, jobReadBytes)
	return &b
}}

// readFromReader is ReadFrom for a pipe read on its own (see jobPipes):
// its reads may block, so it reads in small pieces with a buffer of its
// own.
func (w jobWriter) readFromReader(r io.Reader) (int64, error) {
	buf := make([]byte, jobReadShort)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// takeJobSlot reserves one of k's job slots, or refuses with the limit.
func (js *Jobs) takeJobSlot(k meta.ThreadKey, s meta.Settings) error {
	limit := js.maxJobs(s)
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.closed {
		return api.ErrClosed
	}
	tj := js.threads[k]
	if tj == nil {
		tj = &threadJobs{jobs: make(map[uint64]*job)}
		js.threads[k] = tj
	}
	if tj.slots >= limit {
		js.log.Warn("refused: job limit", "tenant", k.Tenant, "thread", k.Thread, "max_jobs", limit)
		return call.Refuse(api.ErrJobLimit, fmt.Sprintf("This thread already runs %d background jobs, its limit (maxJobs). Wait for one to end, or stop one, before you start another.", limit))
	}
	tj.slots++
	js.wg.Add(1)
	return nil
}

// takeJobSlotIfNotRestoring is takeJobSlot, refused while k's workspace is
// being restored. The slot is taken before the mark is read, and a
// restore marks before it counts the slots: one of the two sees the
// other.
func (js *Jobs) takeJobSlotIfNotRestoring(k meta.ThreadKey, s meta.Settings) error {
	if err := js.takeJobSlot(k, s); err != nil {
		return err
	}
	if why, ok := js.jails.RestoringWhy(k); ok {
		js.releaseJobSlot(k)
		return jails.RestoringError(why)
	}
	return nil
}

// RunningIDs lists the ids of the jobs k runs on this gateway, and
// counts as "starting" the slots taken for jobs not made yet.
func (js *Jobs) RunningIDs(k meta.ThreadKey) []string {
	js.mu.Lock()
	defer js.mu.Unlock()
	tj := js.threads[k]
	if tj == nil {
		return nil
	}
	var ids []string
	for seq, jb := range tj.jobs {
		jb.mu.Lock()
		running := jb.rec.Running
		jb.mu.Unlock()
		if running {
			ids = append(ids, ID(seq))
		}
	}
	slices.Sort(ids)
	for n := tj.slots - len(ids); n > 0; n-- {
		ids = append(ids, "a job being started")
	}
	return ids
}

// WaitThread waits until every job of k has ended and its end is
// recorded.
func (js *Jobs) WaitThread(k meta.ThreadKey) {
	js.mu.Lock()
	var jbs []*job
	if tj := js.threads[k]; tj != nil {
		for _, jb := range tj.jobs {
			jbs = append(jbs, jb)
		}
	}
	js.mu.Unlock()
	for _, jb := range jbs {
		<-jb.done
	}
}

// releaseJobSlot gives back a slot of k whose job never ran or was never
// recorded.
func (js *Jobs) releaseJobSlot(k meta.ThreadKey) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if tj := js.threads[k]; tj != nil && tj.slots > 0 {
		tj.slots--
	}
	js.wg.Done()
}

// runResult is how a command ended.
type runResult struct {
	code int
	err  error
	end  jail.Ended // how it ended, for the reason of its end (endreason.go)
}

// spawn starts a background job in a thread's jail and returns once it
// runs and is recorded.
func (js *Jobs) spawn(ctx context.Context, tenant, thread string, req api.SpawnRequest) (api.JobInfo, error) {
	j, settings, k, cmd, release, err := js.jails.CommandIn(ctx, tenant, thread, req.Command, req.Run, req.Cwd, req.Env)
	if err != nil {
		return api.JobInfo{}, err
	}
	// Held until the job holds its slot (reserveJob), which keeps the
	// jail from being stopped from then on.
	defer release()
	jb, err := js.reserveJob(ctx, k, settings, req.Label, req.Command, req.User)
	if err != nil {
		return api.JobInfo{}, err
	}
	jb.memory, jb.procs, jb.began = j.MemoryLimit(), j.ProcLimit(), time.Now()
	stdin, stdinW := io.Pipe()
	jb.stdin = stdinW
	runCtx, kill := context.WithCancel(context.Background())
	jb.kill = kill
	started := make(chan startInfo, 1)
	result := make(chan runResult, 1)
	cmd.Stdin, cmd.Signals = stdin, jb.signals
	pipes := newJobPipes(js.log)
	cmd.Stdout, cmd.Stderr = jobWriter{js, jb, stdoutStream, pipes}, jobWriter{js, jb, stderrStream, pipes}
	cmd.Watch = pipes.watch
	cmd.Started = func(pid int, cgroup string) { started <- startInfo{pid, cgroup} }
	js.emitJob(api.EventJobStarted, jb, nil, "", "")
	go func() {
		end, err := j.RunEnded(runCtx, cmd)
		pipes.Close()
		result <- runResult{end.Exit, err, end}
	}()
	var st startInfo
	select {
	case st = <-started:
	case res := <-result:
		select {
		case st = <-started: // it ran, and ended at once
		default:
			// It never ran: nothing to record but the attempt.
			js.abandonJob(jb, res.code)
			return api.JobInfo{}, fmt.Errorf("spawn in %s: %w", call.KeyName(k), res.err)
		}
		result <- res
	}
	return js.adoptJob(jb, st, result)
}

// startInfo is where a started command runs.
type startInfo struct {
	pid    int
	cgroup string
}

// reserveJob takes one of k's job slots (or refuses at the limit, with
// the limit's own message for the agent) and numbers a new job: labelled
// label, else command.
func (js *Jobs) reserveJob(ctx context.Context, k meta.ThreadKey, s meta.Settings, label, command, user string) (*job, error) {
	if err := call.CheckText("label", label, call.MaxLabelBytes); err != nil {
		return nil, err
	}
	if err := call.CheckText("user", user, call.MaxLabelBytes); err != nil {
		return nil, err
	}
	if err := js.takeJobSlotIfNotRestoring(k, s); err != nil {
		return nil, err
	}
	seq, err := js.store.NextJobSeq(ctx, k)
	if err != nil {
		js.releaseJobSlot(k)
		return nil, fmt.Errorf("number a job of %s: %w", call.KeyName(k), err)
	}
	if label == "" {
		label = command
	}
	return js.newJob(k, seq, label, user), nil
}

// newJob makes the in-memory job seq of k.
func (js *Jobs) newJob(k meta.ThreadKey, seq uint64, label, user string) *job {
	return &job{
		key: k, seq: seq, label: label, user: user,
		out:     newJobStreams(jobOutputCapacity),
		signals: make(chan syscall.Signal, 1),
		done:    make(chan struct{}),
	}
}

// abandonJob gives up a job that ended before it was recorded (it never
// ran, or it could not be recorded): its input, output and slot go, and
// the stream learns that the job it was told of ended.
func (js *Jobs) abandonJob(jb *job, code int) {
	jb.kill()
	jb.stdin.Close()
	jb.out.Close()
	js.releaseJobSlot(jb.key)
	js.emitJob(api.EventJobEnded, jb, &code, "", "")
}

// adoptJob records a running job, keeps it, and follows it to its end,
// which result tells. Its slot must be taken: the slot's count in
// jobs.wg is the job's until finishJob ends.
func (js *Jobs) adoptJob(jb *job, st startInfo, result chan runResult) (api.JobInfo, error) {
	rec := meta.Job{
		ThreadKey: jb.key, Seq: jb.seq, Label: jb.label, User: jb.user,
		HostID: js.cfg.HostID, Instance: js.instance, BackendID: strconv.Itoa(st.pid),
		Machine: js.cfg.Machine, Cgroup: st.cgroup,
		StartedAt: time.Now().UTC(), Running: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), RecordTimeout)
	rec, err := js.store.CreateJob(ctx, rec)
	cancel()
	if err != nil {
		// A job nobody can list must not run: end it.
		jb.kill()
		js.abandonJob(jb, (<-result).code)
		return api.JobInfo{}, fmt.Errorf("record job %s of %s: %w", ID(jb.seq), call.KeyName(jb.key), err)
	}
	jb.mu.Lock()
	jb.rec = rec
	jb.mu.Unlock()
	js.mu.Lock()
	tj := js.threads[jb.key]
	if tj == nil {
		tj = &threadJobs{jobs: make(map[uint64]*job)}
		js.threads[jb.key] = tj
	}
	tj.jobs[jb.seq] = jb
	js.mu.Unlock()
	js.metrics.JobStarted()
	js.log.Info("job started", "tenant", jb.key.Tenant, "thread", jb.key.Thread, "job", ID(jb.seq), "pid", st.pid, "user", jb.user)
	go js.finishJob(jb, result)
	return jb.info(), nil
}

// finishJob waits for a job's end, then records it, tells the stream and
// frees its slot.
func (js *Jobs) finishJob(jb *job, result chan runResult) {
	defer js.wg.Done()
	res := <-result
	code := res.code
	// Counted before the end is recorded: whoever sees it recorded
	// finds it counted.
	js.metrics.JobEnded(jb.out.Size())
	jb.stdin.Close()
	jb.kill()
	// The record first, then the end of the output: a client that saw
	// the output end finds the end recorded.
	ctx, cancel := context.WithTimeout(context.Background(), RecordTimeout)
	defer cancel()
	jb.mu.Lock()
	rec := jb.rec
	jb.mu.Unlock()
	rec.Running, rec.ExitCode, rec.EndedAt = false, &code, time.Now().UTC()
	jb.mu.Lock()
	cause := endCause{stopping: jb.stopping, signalled: jb.signalled, stopped: jb.stopped}
	killed := jb.killed
	jb.mu.Unlock()
	reason, note := endReason(res.end, res.err, cause, jb.memory, jb.procs)
	reason, note = js.lookupNote(jb.key, jb.began, code, reason, note)
	switch {
	case errors.Is(res.err, jail.ErrInitGone) && reason != api.ReasonOOM:
		// Its jail ended under it (jail.Run gives 137 then): the gateway
		// ended it (close, delete, a stop of the daemon), or its init died.
		why := cause.stopping
		if why == "" {
			why = "its thread's jail ended unexpectedly"
		}
		note = KilledNote(ID(jb.seq), why)
	case killed && code == KilledExit && reason == api.ReasonKilled:
		note = ClientKillNote(ID(jb.seq))
	}
	rec.Reason, rec.Note = reason, note
	if stored, err := js.updateJob(ctx, rec); err != nil {
		// This gateway still knows how the job ended, and says so.
		js.log.Error("record the end of a job", "tenant", jb.key.Tenant, "thread", jb.key.Thread, "job", ID(jb.seq), "error", err)
	} else {
		rec = stored
	}
	jb.mu.Lock()
	jb.rec = rec
	jb.mu.Unlock()
	jb.out.Close()

	js.mu.Lock()
	idle := false
	if tj := js.threads[jb.key]; tj != nil {
		tj.slots--
		tj.ended = append(tj.ended, jb.seq)
		if len(tj.ended) > endedJobsKept {
			delete(tj.jobs, tj.ended[0])
			tj.ended = tj.ended[1:]
		}
		// A gateway that is closing unmounts everything itself.
		idle = tj.closing && tj.slots == 0 && !js.closed
	}
	if idle {
		// Counted while this job's own count holds, so it cannot follow
		// Close's Wait.
		js.wg.Add(1)
	}
	js.mu.Unlock()
	if idle {
		go func() {
			defer js.wg.Done()
			js.closeIdle(jb.key)
		}()
	}
	close(jb.done)
	logArgs := []any{"tenant", jb.key.Tenant, "thread", jb.key.Thread, "job", ID(jb.seq), "exit", code}
	if reason != "" {
		logArgs = append(logArgs, "reason", reason)
	}
	if note != "" {
		logArgs = append(logArgs, "note", note)
	}
	js.log.Info("job ended", logArgs...)
	js.emitJob(api.EventJobEnded, jb, &code, note, reason)
}

// updateJob writes rec over the stored job, whatever revision is stored:
// this gateway is the job's only writer while it runs it, so a conflict
// can only be a write of its own that it did not see answered.
func (js *Jobs) updateJob(ctx context.Context, rec meta.Job) (meta.Job, error) {
	for range 5 {
		out, err := js.store.UpdateJob(ctx, rec)
		if !errors.Is(err, meta.ErrConflict) {
			return out, err
		}
		cur, err := js.store.GetJob(ctx, rec.ThreadKey, rec.Seq)
		if err != nil {
			return rec, err
		}
		rec.Revision = cur.Revision
	}
	return rec, fmt.Errorf("update job %s: %w", ID(rec.Seq), meta.ErrConflict)
}

// emitJob tells the stream about a job.
func (js *Jobs) emitJob(t api.EventType, jb *job, exit *int, note, reason string) {
	js.events.Emit(api.Event{Type: t, Tenant: jb.key.Tenant, Thread: jb.key.Thread, Job: ID(jb.seq),
		Label: jb.label, User: jb.user, Exit: exit, Message: note, Reason: reason})
}

// localJob returns job id of a thread, if this gateway has it.
func (js *Jobs) localJob(p call.Params) (*job, meta.ThreadKey, uint64, error) {
	k, err := call.ThreadKey(p.Tenant, p.Thread)
	if err != nil {
		return nil, k, 0, err
	}
	seq, err := parseJobID(p.Job)
	if err != nil {
		return nil, k, 0, err
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	if tj := js.threads[k]; tj != nil {
		return tj.jobs[seq], k, seq, nil
	}
	return nil, k, seq, nil
}

// mustExist refuses op, a call that never binds, on thread k when it has
// no record (call.NoThread). A closed thread exists. It is asked only
// when the thread has no jobs, or not the one asked for, so that a call
// of a thread with jobs costs no read more.
func (js *Jobs) mustExist(ctx context.Context, op string, k meta.ThreadKey) error {
	if _, err := js.store.GetBinding(ctx, k); errors.Is(err, meta.ErrNotFound) {
		return call.NoThread(k, op)
	} else if err != nil {
		return fmt.Errorf("%s of %s: read the binding: %w", op, call.KeyName(k), err)
	}
	return nil
}

// listJobs lists a thread's jobs from the store: those of every host and of
// earlier runs of this one, running true only for those that run here.
func (js *Jobs) listJobs(ctx context.Context, tenant, thread string) ([]api.JobInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return nil, err
	}
	recs, err := js.store.ListJobs(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("jobs of %s: %w", call.KeyName(k), err)
	}
	if len(recs) == 0 {
		if err := js.mustExist(ctx, "the job list", k); err != nil {
			return nil, err
		}
	}
	out := make([]api.JobInfo, 0, len(recs))
	for _, rec := range recs {
		out = append(out, js.jobInfo(k, rec))
	}
	return out, nil
}

// jobInfo shows a stored job, with what this gateway knows of it.
func (js *Jobs) jobInfo(k meta.ThreadKey, rec meta.Job) api.JobInfo {
	js.mu.Lock()
	var jb *job
	if tj := js.threads[k]; tj != nil {
		jb = tj.jobs[rec.Seq]
	}
	js.mu.Unlock()
	if jb != nil {
		return jb.info()
	}
	return api.JobInfo{Job: rec, ID: ID(rec.Seq), Ended: !rec.Running}
}

// showJob returns one job of a thread.
func (js *Jobs) showJob(ctx context.Context, tenant, thread, id string) (api.JobInfo, error) {
	_, k, seq, err := js.localJob(call.Params{Tenant: tenant, Thread: thread, Job: id})
	if err != nil {
		return api.JobInfo{}, err
	}
	rec, err := js.store.GetJob(ctx, k, seq)
	if errors.Is(err, meta.ErrNotFound) {
		if err := js.mustExist(ctx, "asking for a job", k); err != nil {
			return api.JobInfo{}, err
		}
		return api.JobInfo{}, fmt.Errorf("%w: no job %s in thread %s", api.ErrNotFound, id, call.KeyName(k))
	}
	if err != nil {
		return api.JobInfo{}, fmt.Errorf("job %s of %s: %w", id, call.KeyName(k), err)
	}
	return js.jobInfo(k, rec), nil
}

// stopJob stops a running job: SIGTERM to its whole tree, SIGKILL after
// grace. It returns once the job's end is recorded. A job that ended
// already is returned as it is.
func (js *Jobs) stopJob(ctx context.Context, tenant, thread, id string, grace time.Duration) (api.JobInfo, error) {
	jb, _, _, err := js.localJob(call.Params{Tenant: tenant, Thread: thread, Job: id})
	if err != nil {
		return api.JobInfo{}, err
	}
	if jb == nil {
		info, err := js.showJob(ctx, tenant, thread, id)
		if err != nil {
			return api.JobInfo{}, err
		}
		if !info.Ended {
			return api.JobInfo{}, fmt.Errorf("%w: job %s does not run on this host (it ran on %s), which cannot stop it", api.ErrConflict, id, call.HostName(info.HostID))
		}
		return info, nil
	}
	jb.mu.Lock()
	jb.signalled, jb.stopped = true, true
	jb.mu.Unlock()
	select {
	case jb.signals <- syscall.SIGTERM:
	default: // a signal is already on its way
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-jb.done:
	case <-timer.C:
		jb.kill()
		select {
		case <-jb.done:
		case <-ctx.Done():
			return api.JobInfo{}, ctx.Err()
		}
	case <-ctx.Done():
		return api.JobInfo{}, ctx.Err()
	}
	js.log.Info("job stopped", "tenant", jb.key.Tenant, "thread", jb.key.Thread, "job", id)
	return jb.info(), nil
}

// NoteRestarted marks the jobs that an earlier run of this host left
// running as stopped: they ended with it (their jails die with their
// gateway). Each is noted once, by compare-and-set: a second start finds
// them stopped already.
func (js *Jobs) NoteRestarted(ctx context.Context, bs []meta.Binding) {
	for _, b := range bs {
		// A thread another host took over had this host's jobs noted
		// by that host then (NoteMoved): one read per thread of
		// this host's is enough at a start.
		if b.HostID != js.cfg.HostID {
			continue
		}
		// They died with this host's former run: a jail's init ends
		// when its gateway's process does (jail/doc.go), and the kernel
		// kills every process of its pid namespace with it.
		exit := KilledExit
		js.NoteLeft(ctx, b.ThreadKey, "job stopped by a restart", &exit, func(rec meta.Job) (string, bool) {
			if rec.HostID != js.cfg.HostID || rec.Instance == js.instance {
				return "", false
			}
			return fmt.Sprintf("Background job %s stopped when the host restarted.", ID(rec.Seq)), true
		})
	}
}

// NoteMoved notes, once each, the jobs another host left running on a
// thread this daemon takes over. Jobs do not move. One that ran on this
// machine is stopped here (its cgroup is on this machine); one elsewhere
// may still run, and this daemon cannot stop it.
func (js *Jobs) NoteMoved(ctx context.Context, k meta.ThreadKey) {
	js.NoteLeft(ctx, k, "job of a former host noted", nil, func(rec meta.Job) (string, bool) {
		if rec.HostID == js.cfg.HostID {
			return "", false
		}
		id := ID(rec.Seq)
		if rec.Machine != "" && rec.Machine == js.cfg.Machine && rec.Cgroup != "" {
			err := jail.StopTree(rec.Cgroup)
			if err == nil {
				return fmt.Sprintf("Background job %s was stopped: it ran on a host before the session moved to this one.", id), true
			}
			js.log.Warn("stop a job of a former host", "tenant", k.Tenant, "thread", k.Thread, "job", id, "error", err)
		}
		return fmt.Sprintf("Background job %s may still run: it ran on a host before this one, and this host cannot stop it.", id), true
	})
}

// NoteLeft ends in the store, each with its note and exit (if not
// nil) as its exit code, the jobs of thread k recorded running that note
// says were left by a gateway that no longer runs them, and tells the
// stream (job.ended) and the log (logged). Each is noted once: the update
// is a compare-and-set, so a job another gateway, or another start of
// this one, noted first is not noted again.
func (js *Jobs) NoteLeft(ctx context.Context, k meta.ThreadKey, logged string, exit *int, note func(meta.Job) (string, bool)) {
	recs, err := js.store.ListJobs(ctx, k)
	if err != nil {
		js.log.Error("list jobs to note", "tenant", k.Tenant, "thread", k.Thread, "error", err)
		return
	}
	for _, rec := range recs {
		if !rec.Running {
			continue
		}
		text, left := note(rec)
		if !left {
			continue
		}
		rec.Running, rec.EndedAt, rec.Note = false, time.Now().UTC(), text
		if exit != nil {
			rec.ExitCode = exit
		}
		if _, err := js.store.UpdateJob(ctx, rec); err != nil {
			// Noted first elsewhere, or the store failed: not again.
			js.log.Warn("note a job left running", "tenant", k.Tenant, "thread", k.Thread, "job", ID(rec.Seq), "error", err)
			continue
		}
		js.log.Info(logged, "tenant", k.Tenant, "thread", k.Thread, "job", ID(rec.Seq), "note", text)
		js.events.Emit(api.Event{Type: api.EventJobEnded, Tenant: k.Tenant, Thread: k.Thread, Job: ID(rec.Seq),
			Label: rec.Label, User: rec.User, Exit: exit, Message: text})
	}
}

// EndThread waits for the jobs of k to end and forgets them; their
// jail must be closed already (that ends them).
func (js *Jobs) EndThread(k meta.ThreadKey) {
	js.mu.Lock()
	tj := js.threads[k]
	delete(js.threads, k)
	js.mu.Unlock()
	if tj == nil {
		return
	}
	for _, jb := range tj.jobs {
		jb.kill()
		<-jb.done
	}
}

// NoteWorkspace keeps note on k's workspace for the model: the first
// frame of k's next command carries it (ExecFrame.Notice), once. A second
// note before that command joins the first.
func (js *Jobs) NoteWorkspace(k meta.ThreadKey, note string) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if old := js.notices[k]; old != "" {
		note = old + " " + note
	}
	js.notices[k] = note
}

// takeNotice returns k's note for the model, if any, and forgets it.
func (js *Jobs) takeNotice(k meta.ThreadKey) string {
	js.mu.Lock()
	defer js.mu.Unlock()
	n := js.notices[k]
	delete(js.notices, k)
	return n
}

// Running counts the jobs k runs on this gateway (and those being
// started).
func (js *Jobs) Running(k meta.ThreadKey) int {
	js.mu.Lock()
	defer js.mu.Unlock()
	if tj := js.threads[k]; tj != nil {
		return tj.slots
	}
	return 0
}

// SetClosing marks k as closed while its jobs run, or not.
func (js *Jobs) SetClosing(k meta.ThreadKey, closing bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if tj := js.threads[k]; tj != nil {
		tj.closing = closing
	}
}

// closeIdle takes down the jail and mount of a thread that was closed
// while its jobs ran, once the last one ended, unless the thread was
// bound again meanwhile.
func (js *Jobs) closeIdle(k meta.ThreadKey) {
	done, err := js.threadRoom.TakeDown(context.Background(), k, func(ctx context.Context) bool {
		b, err := js.store.GetBinding(ctx, k)
		return err == nil && b.State == meta.StateClosed && js.Closing(k) && js.Running(k) == 0
	})
	switch {
	case err != nil:
		js.log.Warn("take down a closed thread whose jobs ended", "tenant", k.Tenant, "thread", k.Thread, "error", err)
	case done:
		js.log.Info("closed thread idle: jail and mount gone", "tenant", k.Tenant, "thread", k.Thread)
	}
}
