package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
)

// Commands run in the thread's jail (package jail): one per bound thread,
// made at its first command and closed when the thread is closed or
// deleted or the gateway stops. The answer streams the command's output as
// NDJSON frames and ends with its exit code.

// DefaultExecTimeout bounds a command with no timeout of its own.
const DefaultExecTimeout = 10 * time.Minute

// maxExecTimeout bounds any command.
const maxExecTimeout = 24 * time.Hour

// TimeoutExit is the exit code of a command that ran out of time, as
// timeout(1) gives it.
const TimeoutExit = 124

// execStream runs one command and writes its frames.
type execStream struct {
	js       *Jobs
	j        *jail.Jail
	cmd      jail.Cmd
	timeout  time.Duration
	run      *runningExec
	id       string        // run's id, registered by Handlers.Exec (jails.StartExec)
	settings meta.Settings // the thread's, for its job limit
	label    string        // the command, as a job's label
}

// runningExec is a command that takes input, signals or resizes while it
// runs.
type runningExec struct {
	key    meta.ThreadKey
	stdin  *io.PipeWriter    // nil unless its input is open
	resize chan jail.Winsize // nil unless it has a terminal
	// signals go to its tree (jail.Cmd.Signals), and to its job's once it
	// moved to the background: the job takes the channel over.
	signals chan syscall.Signal
	mu      sync.Mutex // serializes writes to stdin
	// moves asks the command's stream to move it to the background
	// (Handlers.Background); ended is closed when the stream is done with
	// it, moved or not.
	moves chan moveRequest
	ended chan struct{}
	moved bool   // set by the stream before ended closes: the job owns stdin
	job   string // the job it became, set with moved
	// signalled says a client sent it a signal, and stopping (a string)
	// why the gateway ends its jail (NoteStopping): for the reason of its
	// end.
	signalled atomic.Bool
	stopping  atomic.Value
}

// Thread, Stopping and Job make it a jails.Command.
func (re *runningExec) Thread() meta.ThreadKey { return re.key }
func (re *runningExec) Stopping(why string)    { re.stopping.Store(why) }
func (re *runningExec) Job() string            { return re.job }

// moveRequest asks a running exec to become a job.
type moveRequest struct {
	req   api.BackgroundRequest
	reply chan moveReply
}

type moveReply struct {
	job api.JobInfo
	err error
}

// endExec forgets running command id and closes its input, unless its job
// owns it now.
func (js *Jobs) endExec(id string) {
	re, _ := js.jails.EndExec(id).(*runningExec)
	if re == nil {
		return
	}
	if re.stdin != nil && !re.moved {
		re.stdin.Close()
	}
	close(re.ended)
}

// runningFor finds a running command of a thread.
func (js *Jobs) runningFor(p call.Params) (*runningExec, error) {
	k, err := call.ThreadKey(p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	re, _ := js.jails.Exec(p.Exec).(*runningExec)
	if re == nil || re.key != k {
		return nil, fmt.Errorf("%w: no running command %s in thread %s", api.ErrNotFound, call.Quote(p.Exec), call.KeyName(k))
	}
	return re, nil
}

// frames writes an exec answer's frames, one at a time, each flushed.
type frames struct {
	mu    sync.Mutex
	enc   *json.Encoder
	flush func()
	done  bool // the answer is over: flushLater's flush does nothing; guarded by mu
}

// execIDDelay is how long the id of a command that takes no input waits
// for the command's first output, or its end, to ride with: a command
// that says nothing for longer gets it alone, for a signal or a move to
// the background.
const execIDDelay = 20 * time.Millisecond

// flushLater sends, after d, what was written and not flushed, unless
// the answer is over; call the function it returns before the answer
// ends.
func (fr *frames) flushLater(d time.Duration) (stop func()) {
	t := time.AfterFunc(d, func() {
		fr.mu.Lock()
		defer fr.mu.Unlock()
		if !fr.done {
			fr.flush()
		}
	})
	return func() {
		t.Stop()
		fr.mu.Lock()
		fr.done = true
		fr.mu.Unlock()
	}
}

func (fr *frames) write(f api.ExecFrame) error {
	return fr.writeFlush(f, true)
}

// writeFlush writes f, and sends it at once if flush is set; otherwise it
// goes with the next frame that is flushed.
func (fr *frames) writeFlush(f api.ExecFrame, flush bool) error {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if err := fr.enc.Encode(f); err != nil {
		return err
	}
	if flush {
		fr.flush()
	}
	return nil
}

// stream is an io.Writer of one output stream's frames.
func (fr *frames) stream(name string) io.Writer { return streamWriter{fr, name} }

type streamWriter struct {
	fr   *frames
	name string
}

func (w streamWriter) Write(b []byte) (int, error) {
	if err := w.fr.write(api.ExecFrame{Stream: w.name, Data: string(b)}); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s *execStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	out := &frames{enc: json.NewEncoder(w), flush: func() {
		if flusher != nil {
			flusher.Flush()
		}
	}}
	id := s.id
	defer s.js.endExec(id)
	// A client needs the id at once to send input or resize; for the
	// others it rides with the first output or the end, which saves a
	// wake-up per command, or goes alone after execIDDelay, for a
	// command that runs on without a word (to signal it, or move it).
	now := s.run.stdin != nil || s.run.resize != nil
	out.writeFlush(api.ExecFrame{ID: id, Notice: s.js.takeNotice(s.run.key)}, now)
	if !now {
		defer out.flushLater(execIDDelay)()
	}
	stdout := "stdout"
	if s.cmd.Tty {
		stdout = "tty"
	}
	// The output goes to the client until the command moves to the
	// background, then to its job.
	sout, serr := &switchWriter{w: out.stream(stdout)}, &switchWriter{w: out.stream("stderr")}
	s.cmd.Stdout, s.cmd.Stderr = sout, serr
	signals := s.run.signals
	started := make(chan startInfo, 1)
	s.cmd.Signals, s.cmd.Started = signals, func(pid int, cgroup string) { started <- startInfo{pid, cgroup} }

	// The command ends when the client goes away or its time is up, unless
	// it became a job: so its life is not the request's.
	runCtx, kill := context.WithCancel(context.Background())
	var timedOut atomic.Bool
	timer := time.AfterFunc(s.timeout, func() { timedOut.Store(true); kill() })
	result := make(chan runResult, 1)
	began := time.Now()
	go func() {
		end, err := s.j.RunEnded(runCtx, s.cmd)
		result <- runResult{end.Exit, err, end}
	}()
	for {
		select {
		case res := <-result:
			timer.Stop()
			kill()
			s.js.metrics.ExecEnded(time.Since(began))
			end := api.ExecFrame{Exit: &res.code}
			var cause endCause
			if timedOut.Load() {
				res.code, end.TimedOut = TimeoutExit, true
				cause.timeout = s.timeout
			}
			cause.signalled = s.run.signalled.Load()
			if why, ok := s.run.stopping.Load().(string); ok {
				cause.stopping = why
			}
			end.Reason, end.Note = endReason(res.end, res.err, cause, s.j.MemoryLimit(), s.j.ProcLimit())
			end.Reason, end.Note = s.js.lookupNote(s.run.key, began, res.code, end.Reason, end.Note)
			if res.err != nil {
				end.Error = res.err.Error()
			}
			out.write(end)
			return
		case <-r.Context().Done():
			kill()
			<-result
			timer.Stop()
			return
		case mv := <-s.run.moves:
			info, err := s.toBackground(mv.req, kill, signals, started, result, timer, sout, serr, began)
			mv.reply <- moveReply{info, err}
			if err != nil {
				continue // refused: it stays in the foreground
			}
			out.write(api.ExecFrame{Background: info.ID})
			return
		}
	}
}

// toBackground makes the running command a job, if the thread has a free
// job slot: its output goes to the job from now on, each stream to its
// own (a terminal's to stdout), its time limit ends, and its end and its
// signals are the job's. Only the stream's goroutine calls it.
func (s *execStream) toBackground(req api.BackgroundRequest, kill context.CancelFunc, signals chan syscall.Signal,
	started chan startInfo, result chan runResult, timer *time.Timer, sout, serr *switchWriter, began time.Time) (api.JobInfo, error) {
	js, k := s.js, s.run.key
	ctx, cancel := context.WithTimeout(context.Background(), RecordTimeout)
	jb, err := js.reserveJob(ctx, k, s.settings, req.Label, s.label, req.User)
	cancel()
	if err != nil {
		return api.JobInfo{}, err
	}
	jb.kill, jb.signals = kill, signals
	jb.memory, jb.procs, jb.began = s.j.MemoryLimit(), s.j.ProcLimit(), began
	jb.stdin = s.run.stdin
	if jb.stdin == nil {
		// Its input was all given with the call and is closed already.
		_, jb.stdin = io.Pipe()
	}
	timer.Stop()
	js.emitJob(api.EventJobStarted, jb, nil, "", "")
	sout.set(jobWriter{js, jb, stdoutStream, nil})
	serr.set(jobWriter{js, jb, stderrStream, nil})
	s.run.moved, s.run.job = true, ID(jb.seq)
	var st startInfo
	select {
	case st = <-started:
	default:
	}
	return js.adoptJob(jb, st, result)
}

// switchWriter passes writes to a writer that can be replaced.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (sw *switchWriter) Write(p []byte) (int, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.w.Write(p)
}

func (sw *switchWriter) set(w io.Writer) {
	sw.mu.Lock()
	sw.w = w
	sw.mu.Unlock()
}
