package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/jails"
	"warren/jail"
)

// The API of commands (exec.go) and background jobs (jobs.go).

// Handlers answers the calls of commands and jobs: an exec, its input,
// size, signals and move to the background; a job's spawn, list, show,
// output, stop, input and signals.
type Handlers struct{ js *Jobs }

// NewHandlers returns the handlers of js's calls.
func NewHandlers(js *Jobs) *Handlers { return &Handlers{js: js} }

func (h *Handlers) Exec(r *http.Request, p call.Params) (any, error) {
	var req api.ExecRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	timeout := DefaultExecTimeout
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxExecTimeout.Seconds() {
		return nil, fmt.Errorf("%w: timeoutSeconds must be between 0 and %v", api.ErrInvalid, maxExecTimeout.Seconds())
	}
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds * float64(time.Second))
	}
	term, err := jails.ExecTerm(req)
	if err != nil {
		return nil, err
	}
	j, settings, k, cmd, release, err := h.js.jails.CommandIn(r.Context(), p.Tenant, p.Thread, req.Command, req.Run, req.Cwd, req.Env)
	if err != nil {
		return nil, err
	}
	// Held until the command is registered (startExec): from then on it
	// keeps its jail from being stopped itself.
	defer release()
	re := &runningExec{key: k, signals: make(chan syscall.Signal, 1), moves: make(chan moveRequest), ended: make(chan struct{})}
	var stdin io.Reader
	if req.Stdin != "" {
		stdin = strings.NewReader(req.Stdin)
	}
	if req.OpenStdin || req.Tty {
		pr, pw := io.Pipe()
		re.stdin = pw
		if stdin != nil {
			stdin = io.MultiReader(stdin, pr)
		} else {
			stdin = pr
		}
	}
	cmd.Stdin = stdin
	if req.Tty {
		cmd.Tty = true
		cmd.Env = jails.WithTerm(cmd.Env, term)
		cmd.Size = jail.Winsize{Rows: 24, Cols: 80}
		if req.Rows > 0 && req.Cols > 0 {
			cmd.Size = jail.Winsize{Rows: req.Rows, Cols: req.Cols}
		}
		re.resize = make(chan jail.Winsize, 1)
		cmd.Resize = re.resize
	}
	// Registered before the stream is answered, so that a restore of
	// the thread sees it, or it sees the restore and is refused.
	id, err := h.js.jails.StartExec(re)
	if err != nil {
		if re.stdin != nil {
			re.stdin.Close()
		}
		return nil, err
	}
	return &execStream{js: h.js, j: j, cmd: cmd, timeout: timeout, run: re, id: id, settings: settings, label: req.Command}, nil
}

func (h *Handlers) ExecStdin(r *http.Request, p call.Params) (any, error) {
	var req api.ExecStdinRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	re, err := h.js.runningFor(p)
	if err != nil {
		return nil, err
	}
	if re.stdin == nil {
		return nil, fmt.Errorf("%w: the input of %s is not open (ask for openStdin or tty)", api.ErrConflict, p.Exec)
	}
	if err := feed(&re.mu, re.stdin, req, p.Exec); err != nil {
		return nil, err
	}
	return api.ExecAck{ID: p.Exec}, nil
}

func (h *Handlers) ExecResize(r *http.Request, p call.Params) (any, error) {
	var req api.ExecResizeRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	if req.Rows == 0 || req.Cols == 0 {
		return nil, fmt.Errorf("%w: rows and cols must be above 0", api.ErrInvalid)
	}
	re, err := h.js.runningFor(p)
	if err != nil {
		return nil, err
	}
	if re.resize == nil {
		return nil, fmt.Errorf("%w: %s has no terminal", api.ErrConflict, p.Exec)
	}
	// The newest size wins: a size not applied yet is replaced.
	for {
		select {
		case re.resize <- jail.Winsize{Rows: req.Rows, Cols: req.Cols}:
			return api.ExecAck{ID: p.Exec}, nil
		default:
			select {
			case <-re.resize:
			default:
			}
		}
	}
}

func (h *Handlers) ExecSignal(r *http.Request, p call.Params) (any, error) {
	var req api.SignalRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	sig, name, err := parseSignal(string(req.Signal))
	if err != nil {
		return nil, err
	}
	if err := h.js.signalExec(r.Context(), p, sig); err != nil {
		return nil, err
	}
	h.js.log.Info("command signalled", "tenant", p.Tenant, "thread", p.Thread, "exec", p.Exec, "signal", name, "actor", call.Actor(r.Context()))
	return api.SignalExecResponse{ID: p.Exec, Signal: name}, nil
}

// Background moves a running exec to the background. At the job
// limit it is refused and the exec goes on in the foreground.
func (h *Handlers) Background(r *http.Request, p call.Params) (any, error) {
	var req api.BackgroundRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	re, err := h.js.runningFor(p)
	if err != nil {
		return nil, err
	}
	mv := moveRequest{req: req, reply: make(chan moveReply, 1)}
	select {
	case re.moves <- mv:
	case <-re.ended:
		return nil, fmt.Errorf("%w: %s has ended", api.ErrNotFound, p.Exec)
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	rep := <-mv.reply
	if rep.err != nil {
		return nil, rep.err
	}
	return api.JobResponse{Job: rep.job}, nil
}

func (h *Handlers) Spawn(r *http.Request, p call.Params) (any, error) {
	var req api.SpawnRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	info, err := h.js.spawn(r.Context(), p.Tenant, p.Thread, req)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (h *Handlers) List(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	jobs, err := h.js.listJobs(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.JobsResponse{Jobs: jobs}, nil
}

func (h *Handlers) Show(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	info, err := h.js.showJob(r.Context(), p.Tenant, p.Thread, p.Job)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (h *Handlers) Output(r *http.Request, p call.Params) (any, error) {
	q, err := call.Query(r, "offset", "follow", "stream")
	if err != nil {
		return nil, err
	}
	stream := q.Get("stream")
	switch stream {
	case "", api.JobStreamAll, api.JobStreamStdout, api.JobStreamStderr:
	default:
		return nil, fmt.Errorf("%w: stream %s is not stdout, stderr or all", api.ErrInvalid, call.Quote(stream))
	}
	offset := int64(0)
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return nil, fmt.Errorf("%w: offset %s is not a number of 0 or more", api.ErrInvalid, call.Quote(v))
		}
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: follow %s is not true or false", api.ErrInvalid, call.Quote(v))
		}
	}
	jb, k, _, err := h.js.localJob(p)
	if err != nil {
		return nil, err
	}
	if jb == nil {
		info, err := h.js.showJob(r.Context(), p.Tenant, p.Thread, p.Job)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: the output of %s of thread %s is not kept on this host (it ran on %s, in another run of its gateway, or ended long ago)",
			api.ErrNotFound, info.ID, call.KeyName(k), call.HostName(info.HostID))
	}
	view, what := jb.out.merged(), "output"
	switch stream {
	case api.JobStreamStdout:
		view, what = jb.out.stream(stdoutStream), "stdout"
	case api.JobStreamStderr:
		view, what = jb.out.stream(stderrStream), "stderr"
	}
	if total, _ := view.Size(); offset > total {
		return nil, fmt.Errorf("%w: offset %d is past the end of the %s (%d bytes so far)", api.ErrInvalid, offset, what, total)
	}
	return &jobOutputStream{jb: jb, view: view, offset: offset, follow: follow}, nil
}

func (h *Handlers) Stop(r *http.Request, p call.Params) (any, error) {
	var req api.StopJobRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	if req.GraceSeconds < 0 || req.GraceSeconds > maxStopGrace.Seconds() {
		return nil, fmt.Errorf("%w: graceSeconds must be between 0 and %v", api.ErrInvalid, maxStopGrace.Seconds())
	}
	grace := DefaultStopGrace
	if req.GraceSeconds > 0 {
		grace = time.Duration(req.GraceSeconds * float64(time.Second))
	}
	info, err := h.js.stopJob(r.Context(), p.Tenant, p.Thread, p.Job, grace)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (h *Handlers) Stdin(r *http.Request, p call.Params) (any, error) {
	var req api.ExecStdinRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	jb, k, _, err := h.js.localJob(p)
	if err != nil {
		return nil, err
	}
	if jb == nil {
		return nil, fmt.Errorf("%w: no job %s runs in thread %s on this host", api.ErrNotFound, p.Job, call.KeyName(k))
	}
	if err := feed(&jb.stdinMu, jb.stdin, req, p.Job); err != nil {
		return nil, err
	}
	return api.JobResponse{Job: jb.info()}, nil
}

// feed writes a stdin request's data to the input of a command or job
// (id), then closes it if asked, holding mu (which serializes the writes
// to it) meanwhile.
func feed(mu *sync.Mutex, stdin *io.PipeWriter, req api.ExecStdinRequest, id string) error {
	mu.Lock()
	defer mu.Unlock()
	if req.Data != "" {
		if _, err := io.WriteString(stdin, req.Data); err != nil {
			return fmt.Errorf("%w: the input of %s is closed", api.ErrConflict, id)
		}
	}
	if req.Close {
		stdin.Close()
	}
	return nil
}

func (h *Handlers) Signal(r *http.Request, p call.Params) (any, error) {
	var req api.SignalRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	sig, name, err := parseSignal(string(req.Signal))
	if err != nil {
		return nil, err
	}
	info, err := h.js.signalJob(r.Context(), p, sig)
	if err != nil {
		return nil, err
	}
	h.js.log.Info("job signalled", "tenant", p.Tenant, "thread", p.Thread, "job", p.Job, "signal", name, "actor", call.Actor(r.Context()))
	return api.SignalJobResponse{Job: info, Signal: name}, nil
}

// jobOutputChunk bounds the data of one output frame.
const jobOutputChunk = 64 << 10

// jobOutputStream writes one view of a job's output (a stream, or both
// merged) from an offset as NDJSON frames, and, when it follows, what
// comes until the job ends. It only reads the rings: a slow client loses
// bytes (each frame says how many), never holds the job back.
type jobOutputStream struct {
	jb     *job
	view   outputView
	offset int64
	follow bool
}

func (s *jobOutputStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	enc := json.NewEncoder(w)
	buf := make([]byte, jobOutputChunk)
	off := s.offset
	for {
		n, start, stream, ended := s.view.Read(off, buf)
		if n > 0 {
			f := api.JobFrame{Offset: start, Stream: stream.String(), Data: string(buf[:n])}
			if off >= 0 && start > off {
				f.Dropped = start - off
			}
			if enc.Encode(f) != nil {
				return
			}
			off = start + int64(n)
			continue
		}
		if off < 0 {
			off = start
		}
		if ended {
			s.jb.mu.Lock()
			reason, note := s.jb.rec.Reason, s.jb.rec.Note
			s.jb.mu.Unlock()
			enc.Encode(api.JobFrame{Offset: off, End: true, Exit: s.jb.exitCode(), Reason: reason, Note: note})
			flush()
			return
		}
		if !s.follow {
			enc.Encode(api.JobFrame{Offset: off})
			flush()
			return
		}
		flush()
		if err := s.view.Wait(r.Context(), off); err != nil {
			return
		}
	}
}
