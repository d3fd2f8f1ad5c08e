package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/gateway/admit"
	"warren/gateway/threadlimit"
	"warren/meta"
)

// maxBodyBytes bounds a request body; a larger one is answered 413.
const maxBodyBytes = 1 << 20

// route is one entry of the API's route table. Pattern segments in braces
// are ids: they match any one escaped segment, which is unescaped on its
// own, so "..", "." and "a%2Fb" arrive as the ids "..", "." and "a/b".
type route struct {
	method  string
	pattern string
	handle  func(g *Gateway, r *http.Request, p params) (any, error)
}

// streamer is an answer that writes itself instead of being encoded as one
// JSON value: a stream that goes on after the headers (GET /v1/events). A
// streaming route's handler checks the request and takes what the stream
// needs before it returns one, so every refusal is still an error answered
// by the router like any other; once serveStream runs the status is 200,
// and a failure can only end the stream.
type streamer interface {
	serveStream(w http.ResponseWriter, r *http.Request)
}

// params are the ids taken from a request's path.
type params struct {
	tenant, thread string
	exec           string // a running command's id, on .../exec/{exec}/...
	job            string // a job's id, on .../jobs/{job}...
}

// routes is the API: the one place every call is listed.
func routes() []route {
	return append([]route{
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/bind", (*Gateway).handleBind},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}", (*Gateway).handleThread},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/close", (*Gateway).handleClose},
		{http.MethodDelete, "/v1/tenants/{tenant}/threads/{thread}", (*Gateway).handleDelete},
		{http.MethodGet, "/v1/threads", (*Gateway).handleThreads},
		{http.MethodGet, "/v1/version", handleVersion},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/unpin", (*Gateway).handleUnpin},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/usage", (*Gateway).handleUsage},
		{http.MethodGet, "/v1/hosts", (*Gateway).handleHosts},
		{http.MethodPost, "/v1/mounts", (*Gateway).handleMount},
		{http.MethodGet, "/v1/mounts", (*Gateway).handleMounts},
		{http.MethodDelete, "/v1/mounts", (*Gateway).handleUnmount},
		{http.MethodGet, "/v1/events", (*Gateway).handleEvents}, // answers a streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/read", (*Gateway).handleReadFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/write", (*Gateway).handleWriteFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/edit", (*Gateway).handleEditFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/list", (*Gateway).handleListFiles},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/stat", (*Gateway).handleStatFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/exists", (*Gateway).handleFileExists},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/mkdir", (*Gateway).handleMkdir},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/remove", (*Gateway).handleRemoveFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/rename", (*Gateway).handleRenameFile},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/files/raw", (*Gateway).handleReadRaw}, // answers a streamer
		{http.MethodPut, "/v1/tenants/{tenant}/threads/{thread}/files/raw", (*Gateway).handleWriteRaw},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/runs", (*Gateway).handleRegisterRun},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/runs/end", (*Gateway).handleEndRun},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec", (*Gateway).handleExec}, // answers a streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/stdin", (*Gateway).handleExecStdin},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/resize", (*Gateway).handleExecResize},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/background", (*Gateway).handleBackground},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs", (*Gateway).handleSpawn},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs", (*Gateway).handleJobs},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}", (*Gateway).handleJob},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/output", (*Gateway).handleJobOutput}, // answers a streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stop", (*Gateway).handleStopJob},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stdin", (*Gateway).handleJobStdin},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/signal", (*Gateway).handleExecSignal},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/signal", (*Gateway).handleJobSignal},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/checkpoints", (*Gateway).handleCheckpoint},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/checkpoints", (*Gateway).handleCheckpoints},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/diff", (*Gateway).handleDiff},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/undo", (*Gateway).handleUndo},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/redo", (*Gateway).handleRedo},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/revert", (*Gateway).handleRevert},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/fork", (*Gateway).handleFork},
	}, opsRoutes()...)
}

// noBodyLimit is bodyLimit's answer for a route whose body is streamed
// to disk, never held: a raw file's content (PUT .../files/raw). Its
// bound is the thread's disk quota, as for any write through its mount;
// the body timeout bounds each pause instead of the whole body
// (deadlineBody.stream).
const noBodyLimit = -1

// bodyLimit is the largest request body a route takes: a file's content
// for the file API's read, write and edit, none for the raw content, and
// maxBodyBytes for every other call.
func bodyLimit(pattern string) int64 {
	switch {
	case strings.HasSuffix(pattern, "/files/raw"):
		return noBodyLimit
	case strings.HasSuffix(pattern, "/files/read"), strings.HasSuffix(pattern, "/files/write"), strings.HasSuffix(pattern, "/files/edit"):
		return maxFileBody
	}
	return maxBodyBytes
}

// admissionOf is what a request is counted as (package admit): a raw
// upload, a stream (an answer that goes on: events, exec output, job
// output, a raw file's content) or a request, and the thread it is
// counted for, from its path or, for the events, its query (the zero key
// when it names none).
func admissionOf(r *http.Request, pattern string, p params) (admit.Kind, meta.ThreadKey) {
	key := meta.ThreadKey{Tenant: p.tenant, Thread: p.thread}
	switch {
	case pattern == "/v1/events":
		q := r.URL.Query()
		if q.Get("thread") != "" {
			key = meta.ThreadKey{Tenant: q.Get("tenant"), Thread: q.Get("thread")}
		}
		return admit.Streams, key
	case strings.HasSuffix(pattern, "/files/raw") && r.Method == http.MethodPut:
		return admit.Uploads, key
	case strings.HasSuffix(pattern, "/files/raw"),
		strings.HasSuffix(pattern, "/exec") && r.Method == http.MethodPost,
		strings.HasSuffix(pattern, "/jobs/{job}/output"):
		return admit.Streams, key
	}
	return admit.Requests, key
}

// router matches requests against the route table on the escaped path,
// segment by segment. It replaces http.ServeMux on purpose: ServeMux cleans
// paths and redirects "/a/../b" to "/b", which would turn a thread id ".."
// into another route.
type router struct {
	g      *Gateway
	routes []compiledRoute // never changed after handler()
	// open serves every peer: the metrics listener's router, whose routes
	// are the operational endpoints only (health.go).
	open bool
}

type compiledRoute struct {
	route
	segs []string
}

func (g *Gateway) handler() http.Handler { return newRouter(g, routes(), false) }

// newRouter routes rs; open serves every peer (the metrics listener).
func newRouter(g *Gateway, rs []route, open bool) *router {
	rt := &router{g: g, open: open}
	for _, r := range rs {
		rt.routes = append(rt.routes, compiledRoute{r, strings.Split(strings.TrimPrefix(r.pattern, "/"), "/")})
	}
	return rt
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := rt.g
	path := r.URL.EscapedPath()

	p := peerFrom(r.Context())
	if !rt.open && (p.err != nil || !g.allowed(p.uid)) {
		g.log.Warn("refused: peer not allowed", "peer_uid", p.uid, "peer_pid", p.pid,
			"method", r.Method, "path", clip(path), "error", p.err)
		// Close the connection: a refused peer gets one answer, no more.
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusForbidden, api.ErrorBody{Error: &api.APIError{
			Code:    api.CodeForbidden,
			Message: fmt.Sprintf("uid %d may not use this gateway", p.uid),
		}})
		return
	}
	body := r.Body
	if body != http.NoBody {
		body = newDeadlineBody(w, body, g.cfg.BodyTimeout)
	}
	r.Body = http.MaxBytesReader(w, body, maxBodyBytes)

	var allow []string
	if strings.HasPrefix(path, "/") {
		segs := strings.Split(path[1:], "/")
		for _, cr := range rt.routes {
			raw, ok := matchSegs(cr.segs, segs)
			if !ok {
				continue
			}
			if cr.method != r.Method {
				allow = append(allow, cr.method)
				continue
			}
			ps, err := unescapeParams(raw)
			if err != nil {
				g.writeError(w, r, ps, err)
				return
			}
			switch limit := bodyLimit(cr.pattern); limit {
			case maxBodyBytes:
			case noBodyLimit:
				if db, ok := body.(*deadlineBody); ok {
					db.stream = true
				}
				r.Body = body
			default:
				r.Body = http.MaxBytesReader(w, body, limit)
			}
			// Counted before the handler takes anything: a refusal
			// costs nothing but its answer.
			if !rt.open {
				kind, key := admissionOf(r, cr.pattern, ps)
				tk, err := g.admit.Enter(kind, p.uid, key)
				if err != nil {
					g.writeError(w, r, ps, err)
					return
				}
				defer tk.Release()
				if body != http.NoBody && kind != admit.Uploads {
					bt, err := g.admit.Enter(admit.Bodies, p.uid, key)
					if err != nil {
						g.writeError(w, r, ps, err)
						return
					}
					defer bt.Release()
					if db, ok := body.(*deadlineBody); ok {
						db.atEnd = bt.Release
					}
				}
			}
			if ps.thread != "" && r.Method != http.MethodGet {
				if k, err := threadKey(ps.tenant, ps.thread); err == nil {
					g.threads.touch(k)
				}
			}
			resp, err := cr.handle(g, r, ps)
			if err != nil {
				g.writeError(w, r, ps, err)
				return
			}
			if s, ok := resp.(streamer); ok {
				s.serveStream(w, r)
				return
			}
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
	if len(allow) > 0 {
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		g.writeErrorCode(w, r, params{}, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", quote(r.Method), quote(path), strings.Join(allow, ", ")))
		return
	}
	g.writeErrorCode(w, r, params{}, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no API call at %s", quote(path)))
}

// matchSegs matches a request's escaped segments against a pattern and
// returns the raw (still escaped) values of its parameters.
func matchSegs(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	var raw map[string]string
	for i, ps := range pattern {
		if strings.HasPrefix(ps, "{") && strings.HasSuffix(ps, "}") {
			if raw == nil {
				raw = make(map[string]string, 2)
			}
			raw[ps[1:len(ps)-1]] = segs[i]
			continue
		}
		if ps != segs[i] {
			return nil, false
		}
	}
	return raw, true
}

// unescapeParams unescapes each id segment on its own.
func unescapeParams(raw map[string]string) (params, error) {
	var p params
	for name, v := range raw {
		u, err := url.PathUnescape(v)
		if err != nil {
			return p, fmt.Errorf("%w: %s id %s is not a valid escaped path segment", api.ErrInvalid, name, quote(v))
		}
		switch name {
		case "tenant":
			p.tenant = u
		case "thread":
			p.thread = u
		case "exec":
			p.exec = u
		case "job":
			p.job = u
		}
	}
	return p, nil
}

func (g *Gateway) handleBind(r *http.Request, p params) (any, error) {
	var req api.BindRequest
	if err := decodeBody(r, &req, true); err != nil {
		return nil, err
	}
	ti, err := g.bindWith(r.Context(), p.tenant, p.thread, req.Settings)
	if err != nil {
		return nil, err
	}
	return api.BindResponse{Binding: ti, MountPath: ti.MountPath}, nil
}

func (g *Gateway) handleThread(r *http.Request, p params) (any, error) {
	if err := noQuery(r); err != nil {
		return nil, err
	}
	ti, err := g.showThread(r.Context(), p.tenant, p.thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

func (g *Gateway) handleClose(r *http.Request, p params) (any, error) {
	if err := decodeBody(r, &struct{}{}, true); err != nil {
		return nil, err
	}
	ti, err := g.closeThread(r.Context(), p.tenant, p.thread)
	if err != nil {
		return nil, err
	}
	return api.ThreadResponse{Binding: ti}, nil
}

func (g *Gateway) handleDelete(r *http.Request, p params) (any, error) {
	if err := noQuery(r); err != nil {
		return nil, err
	}
	k, err := threadKey(p.tenant, p.thread)
	if err != nil {
		return nil, err
	}
	if err := g.deleteThread(r.Context(), k.Tenant, k.Thread); err != nil {
		return nil, err
	}
	return api.DeleteResponse{Deleted: k}, nil
}

func (g *Gateway) handleThreads(r *http.Request, _ params) (any, error) {
	q, err := query(r, "tenant", "limit", "cursor")
	if err != nil {
		return nil, err
	}
	var tenant *string
	if vs, ok := q["tenant"]; ok {
		tenant = &vs[0]
	}
	limit, after, err := pageQuery(q)
	if err != nil {
		return nil, err
	}
	tis, next, err := g.listThreads(r.Context(), tenant, after, limit)
	if err != nil {
		return nil, err
	}
	return api.ThreadsResponse{Bindings: tis, NextCursor: next}, nil
}

func (g *Gateway) handleMount(r *http.Request, _ params) (any, error) {
	var req api.MountRequest
	if err := decodeBody(r, &req, false); err != nil {
		return nil, err
	}
	mi, err := g.mountInspection(r.Context(), req, peerFrom(r.Context()).uid)
	if err != nil {
		return nil, err
	}
	return api.MountResponse{Mount: mi}, nil
}

func (g *Gateway) handleMounts(r *http.Request, _ params) (any, error) {
	if err := noQuery(r); err != nil {
		return nil, err
	}
	ms, err := g.listMounts(r.Context())
	if err != nil {
		return nil, err
	}
	return api.MountsResponse{Mounts: ms}, nil
}

func (g *Gateway) handleUnmount(r *http.Request, _ params) (any, error) {
	q, err := query(r, "path")
	if err != nil {
		return nil, err
	}
	vs, ok := q["path"]
	if !ok || vs[0] == "" {
		return nil, fmt.Errorf("%w: the query parameter path is required", api.ErrInvalid)
	}
	inUse, err := g.unmount(r.Context(), vs[0])
	if err != nil {
		return nil, err
	}
	return api.UnmountResponse{Unmounted: vs[0], InUse: inUse}, nil
}

// decodeBody decodes the request body as one JSON object into v, refusing
// unknown fields and trailing data. An empty body is accepted if
// emptyOK; any other JSON value (null, an array, a number) is refused:
// decoded into a struct, null and an empty body would pass as an object
// of zero fields, which no caller means.
func decodeBody(r *http.Request, v any, emptyOK bool) error {
	if err := noQuery(r); err != nil {
		return err
	}
	br := bufio.NewReader(r.Body)
	first, err := firstNonSpace(br)
	if errors.Is(err, io.EOF) {
		if emptyOK {
			return nil
		}
		return fmt.Errorf("%w: the request needs a JSON body", api.ErrInvalid)
	}
	if err != nil {
		return bodyError(err)
	}
	if first != '{' {
		return fmt.Errorf("%w: the request body must be a JSON object", api.ErrInvalid)
	}
	dec := json.NewDecoder(br)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return bodyError(err)
		}
		return fmt.Errorf("%w: data after the JSON body", api.ErrInvalid)
	}
	return nil
}

// firstNonSpace peeks at the first byte of br after JSON white space.
func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return b, br.UnreadByte()
	}
}

func bodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("request body larger than %d bytes: %w", tooLarge.Limit, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the request body did not arrive in time", errBodyTimeout)
	}
	return fmt.Errorf("%w: malformed JSON body: %w", api.ErrInvalid, err)
}

// query parses the query string, allowing only the named keys, each once.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %w", api.ErrInvalid, err)
	}
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%w: unknown query parameter %s", api.ErrInvalid, quote(k))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: query parameter %s given %d times", api.ErrInvalid, quote(k), len(vs))
		}
	}
	return q, nil
}

func noQuery(r *http.Request) error {
	_, err := query(r)
	return err
}

// writeError answers err as JSON with the status of its class, and logs
// the refusal with the thread and the path.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, p params, err error) {
	status, code := classify(err)
	if errors.Is(err, admit.ErrLimit) {
		// A refusal, not a failure: a warning, as every refusal.
		g.metrics.apiError(code)
		g.log.Warn("refused: limit", "method", r.Method, "path", clip(r.URL.EscapedPath()),
			"tenant", clip(p.tenant), "thread", clip(p.thread), "status", status, "code", code, "error", err)
		w.Header().Set("Retry-After", admit.RetryAfterHeader())
		// The body, if any, was not read; and a refused client is
		// best given its descriptor back.
		w.Header().Set("Connection", "close")
		writeJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: err.Error()}})
		return
	}
	if code == api.CodeUnavailable {
		// The store did not answer, or a limit of this server refused a
		// new thread or jail: a retry after a pause may work.
		w.Header().Set("Retry-After", admit.RetryAfterHeader())
	}
	if capacityRefusal(err) {
		// A refusal, not a failure (logged where it refused): no error
		// line per refused call.
		g.metrics.apiError(code)
		writeJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: boundMessage(err.Error())}})
		return
	}
	g.writeErrorCode(w, r, p, status, code, err.Error())
}

// capacityRefusal says whether err refuses a new thread past a limit of
// the server (package threadlimit) or a jail past --max-jails.
func capacityRefusal(err error) bool {
	var tr *threadlimit.Refusal
	var jr *jailBoundError
	return errors.As(err, &tr) || errors.As(err, &jr)
}

func (g *Gateway) writeErrorCode(w http.ResponseWriter, r *http.Request, p params, status int, code, msg string) {
	g.metrics.apiError(code)
	args := []any{"method", r.Method, "path", clip(r.URL.EscapedPath()), "tenant", clip(p.tenant), "thread", clip(p.thread),
		"status", status, "code", code, "error", clip(msg)}
	if status >= 500 {
		g.log.Error("request failed", args...)
	} else {
		g.log.Warn("refused: request", args...)
	}
	if status == http.StatusRequestEntityTooLarge || status == http.StatusRequestTimeout {
		// The rest of the body was not read; do not reuse the connection.
		w.Header().Set("Connection", "close")
	}
	// The one bound on what an answer echoes: a message quotes client
	// input through quote, and is cut here whatever it quotes.
	writeJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: boundMessage(msg)}})
}

// clip shortens what a client sent before it goes into a log line: a
// refused 60 KiB path is noise, its first bytes are enough to find it.
func clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:max], len(s))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Paths and ids are data: keep "<", ">" and "&" as they are.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing left to tell it
}

// deadlineBody bounds how long a request's body takes to arrive: the
// connection's read deadline is set when the handler starts, and cleared
// as soon as the body has been read to its end.
//
// Clearing it matters: once the body is read, net/http keeps a read
// pending on the connection to notice a client that hangs up, and a
// deadline firing there would cancel the request's context, cutting a
// long answer (exec output, a bind that takes a while) that is still
// wanted. net/http clears the deadline itself when it starts that read
// (Go 1.26); this does not depend on it. Requests without a body never
// get a deadline: their pending read starts before the handler.
//
// A streamed body (stream: a raw file's content, of any size) gets the
// timeout for each wait instead: every read that brings bytes moves the
// deadline on, so an upload takes as long as it needs while it keeps
// coming, and one that stalls for the timeout is cut.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	stream  bool // set before the body is read
	cleared bool
	// atEnd, if set, is called once the body was read to its end: it
	// gives back the body's place (package admit).
	atEnd func()
}

func newDeadlineBody(w http.ResponseWriter, body io.ReadCloser, timeout time.Duration) io.ReadCloser {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		// Not a connection with deadlines (a test's recorder): no bound.
		return body
	}
	return &deadlineBody{ReadCloser: body, rc: rc, timeout: timeout}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.cleared:
	case err == io.EOF:
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{}) // the connection is still there: it was just read
		if b.atEnd != nil {
			b.atEnd()
		}
	case n > 0 && b.stream:
		_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	return n, err
}
