package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"warren/api"
	"warren/gateway/call"
)

// The API of background jobs (jobs.go).

func (g *Gateway) handleSpawn(r *http.Request, p call.Params) (any, error) {
	var req api.SpawnRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	info, err := g.spawn(r.Context(), p.Tenant, p.Thread, req)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (g *Gateway) handleJobs(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	jobs, err := g.listJobs(r.Context(), p.Tenant, p.Thread)
	if err != nil {
		return nil, err
	}
	return api.JobsResponse{Jobs: jobs}, nil
}

func (g *Gateway) handleJob(r *http.Request, p call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	info, err := g.showJob(r.Context(), p.Tenant, p.Thread, p.Job)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (g *Gateway) handleStopJob(r *http.Request, p call.Params) (any, error) {
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
	info, err := g.stopJob(r.Context(), p.Tenant, p.Thread, p.Job, grace)
	if err != nil {
		return nil, err
	}
	return api.JobResponse{Job: info}, nil
}

func (g *Gateway) handleJobStdin(r *http.Request, p call.Params) (any, error) {
	var req api.ExecStdinRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	jb, k, _, err := g.localJob(p)
	if err != nil {
		return nil, err
	}
	if jb == nil {
		return nil, fmt.Errorf("%w: no job %s runs in thread %s on this host", api.ErrNotFound, p.Job, call.KeyName(k))
	}
	jb.stdinMu.Lock()
	defer jb.stdinMu.Unlock()
	if req.Data != "" {
		if _, err := io.WriteString(jb.stdin, req.Data); err != nil {
			return nil, fmt.Errorf("%w: the input of %s is closed", api.ErrConflict, p.Job)
		}
	}
	if req.Close {
		jb.stdin.Close()
	}
	return api.JobResponse{Job: jb.info()}, nil
}

// handleBackground moves a running exec to the background. At the job
// limit it is refused and the exec goes on in the foreground.
func (g *Gateway) handleBackground(r *http.Request, p call.Params) (any, error) {
	var req api.BackgroundRequest
	if err := call.DecodeBody(r, &req, true); err != nil {
		return nil, err
	}
	re, err := g.runningFor(p)
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

// jobOutputChunk bounds the data of one output frame.
const jobOutputChunk = 64 << 10

func (g *Gateway) handleJobOutput(r *http.Request, p call.Params) (any, error) {
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
	jb, k, _, err := g.localJob(p)
	if err != nil {
		return nil, err
	}
	if jb == nil {
		info, err := g.showJob(r.Context(), p.Tenant, p.Thread, p.Job)
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
