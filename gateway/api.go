package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"warren/api"
	"warren/gateway/admit"
	"warren/gateway/call"
	"warren/gateway/checkpoints"
	"warren/gateway/events"
	"warren/gateway/files"
	"warren/gateway/health"
	"warren/gateway/hosts"
	"warren/gateway/images"
	"warren/gateway/inspect"
	"warren/gateway/jails"
	"warren/gateway/jobs"
	"warren/gateway/metrics"
	"warren/gateway/network"
	"warren/gateway/ports"
	"warren/gateway/threadlimit"
	"warren/gateway/threads"
	"warren/meta"
)

// route is one entry of the API's route table. Pattern segments in braces
// are ids: they match any one escaped segment, which is unescaped on its
// own, so "..", "." and "a%2Fb" arrive as the ids "..", "." and "a/b".
type route struct {
	method  string
	pattern string
	handle  call.Handler
}

// handlers are the rooms' handlers, as the route table calls them; the
// gateway makes them at Start (handlers), for the API's router and the
// metrics listener's.
type handlers struct {
	threads     *threads.Handlers
	health      *health.Handlers
	hosts       *hosts.Handlers
	inspect     *inspect.Handlers
	files       *files.Handlers
	checkpoints *checkpoints.Handlers
	events      *events.Handlers
	metrics     *metrics.Handlers
	jobs        *jobs.Handlers
	network     *network.Handlers
	ports       *ports.Handlers
	images      *images.Handlers
}

// routes is the API: the one place every call is listed.
func routes(h handlers) []route {
	return append([]route{
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/bind", h.threads.Bind},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}", h.threads.Show},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/network", h.network.SetNetwork},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/close", h.threads.Close},
		{http.MethodDelete, "/v1/tenants/{tenant}/threads/{thread}", h.threads.Delete},
		{http.MethodGet, "/v1/threads", h.threads.List},
		{http.MethodGet, "/v1/version", handleVersion},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/unpin", h.hosts.Unpin},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/usage", h.health.Usage},
		{http.MethodGet, "/v1/hosts", h.hosts.Hosts},
		{http.MethodPost, "/v1/mounts", h.inspect.Mount},
		{http.MethodGet, "/v1/mounts", h.inspect.Mounts},
		{http.MethodDelete, "/v1/mounts", h.inspect.Unmount},
		{http.MethodGet, "/v1/events", h.events.Events}, // answers a call.Streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/read", h.files.ReadFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/write", h.files.WriteFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/edit", h.files.EditFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/list", h.files.ListFiles},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/stat", h.files.StatFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/exists", h.files.FileExists},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/mkdir", h.files.Mkdir},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/remove", h.files.RemoveFile},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/files/rename", h.files.RenameFile},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/files/raw", h.files.ReadRaw}, // answers a call.Streamer
		{http.MethodPut, "/v1/tenants/{tenant}/threads/{thread}/files/raw", h.files.WriteRaw},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/runs", h.files.RegisterRun},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/runs/end", h.files.EndRun},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec", h.jobs.Exec}, // answers a call.Streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/stdin", h.jobs.ExecStdin},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/resize", h.jobs.ExecResize},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/background", h.jobs.Background},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs", h.jobs.Spawn},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs", h.jobs.List},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}", h.jobs.Show},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/output", h.jobs.Output}, // answers a call.Streamer
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stop", h.jobs.Stop},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/stdin", h.jobs.Stdin},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/exec/{exec}/signal", h.jobs.ExecSignal},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/jobs/{job}/signal", h.jobs.Signal},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/checkpoints", h.checkpoints.Checkpoint},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/checkpoints", h.checkpoints.List},
		{http.MethodGet, "/v1/tenants/{tenant}/threads/{thread}/diff", h.checkpoints.Diff},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/undo", h.checkpoints.Undo},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/redo", h.checkpoints.Redo},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/revert", h.checkpoints.Revert},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/fork", h.checkpoints.Fork},
		{http.MethodPost, "/v1/tenants/{tenant}/threads/{thread}/ports/{port}", h.ports.OpenPort}, // an upgrade answers a call.Streamer
		{http.MethodDelete, "/v1/tenants/{tenant}/threads/{thread}/ports/{port}", h.ports.ClosePort},
		{http.MethodGet, "/v1/images", h.images.List},
		{http.MethodPost, "/v1/images/pull", h.images.Pull},
		{http.MethodPost, "/v1/images/load", h.images.Load},
		{http.MethodDelete, "/v1/images", h.images.Remove},
	}, opsRoutes(h)...)
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
		return files.MaxFileBody
	}
	return call.MaxBodyBytes
}

// admissionOf is what a request is counted as (package admit): a raw
// upload, a stream (an answer that goes on: events, exec output, job
// output, a raw file's content) or a request, and the thread it is
// counted for, from its path or, for the events, its query (the zero key
// when it names none). A plain TCP connection to a jail's port (an
// upgrade) is a stream.
func admissionOf(r *http.Request, pattern string, p call.Params) (admit.Kind, meta.ThreadKey) {
	key := meta.ThreadKey{Tenant: p.Tenant, Thread: p.Thread}
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
		strings.HasSuffix(pattern, "/jobs/{job}/output"),
		strings.HasSuffix(pattern, "/ports/{port}") && ports.IsUpgrade(r):
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
	// are the operational endpoints only (ops.go).
	open bool
}

type compiledRoute struct {
	route
	segs []string
}

// handlers makes the rooms' handlers.
func (g *Gateway) handlers() handlers {
	return handlers{
		threads:     threads.NewHandlers(g.threads),
		health:      health.NewHandlers(g.health),
		hosts:       hosts.NewHandlers(g.hosts, g.threads),
		inspect:     inspect.NewHandlers(g.inspections),
		files:       files.NewHandlers(g.fileAPI),
		checkpoints: checkpoints.NewHandlers(g.checkpoints),
		events:      events.NewHandlers(g.events),
		metrics:     metrics.NewHandlers(g.metrics),
		jobs:        jobs.NewHandlers(g.jobs),
		network:     network.NewHandlers(g.threads),
		images:      images.NewHandlers(g.images),
		ports:       ports.NewHandlers(g.ports),
	}
}

func (g *Gateway) handler() http.Handler { return newRouter(g, routes(g.handlers()), false) }

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

	p := call.PeerFrom(r.Context())
	if !rt.open && (p.Err != nil || !g.allowed(p.UID)) {
		g.log.Warn("refused: peer not allowed", "peer_uid", p.UID, "peer_pid", p.PID,
			"method", r.Method, "path", call.Clip(path), "error", p.Err)
		// Close the connection: a refused peer gets one answer, no more.
		w.Header().Set("Connection", "close")
		call.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: &api.APIError{
			Code:    api.CodeForbidden,
			Message: fmt.Sprintf("uid %d may not use this gateway", p.UID),
		}})

		return
	}
	body := r.Body
	if body != http.NoBody {
		body = newDeadlineBody(w, body, g.cfg.BodyTimeout)
	}
	r.Body = http.MaxBytesReader(w, body, call.MaxBodyBytes)

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
			case call.MaxBodyBytes:
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
				tk, err := g.admit.Enter(kind, p.UID, key)
				if err != nil {
					g.writeError(w, r, ps, err)
					return
				}
				defer tk.Release()
				if body != http.NoBody && kind != admit.Uploads {
					bt, err := g.admit.Enter(admit.Bodies, p.UID, key)
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
			if ps.Thread != "" && r.Method != http.MethodGet {
				if k, err := call.ThreadKey(ps.Tenant, ps.Thread); err == nil {
					g.threads.Touch(k)
				}
			}
			resp, err := cr.handle(r, ps)
			if err != nil {
				g.writeError(w, r, ps, err)
				return
			}
			if s, ok := resp.(call.Streamer); ok {
				s.ServeStream(w, r)
				return
			}
			call.WriteJSON(w, http.StatusOK, resp)
			return
		}
	}
	if len(allow) > 0 {
		slices.Sort(allow)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		g.writeErrorCode(w, r, call.Params{}, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", call.Quote(r.Method), call.Quote(path), strings.Join(allow, ", ")))
		return
	}
	g.writeErrorCode(w, r, call.Params{}, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no API call at %s", call.Quote(path)))
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
func unescapeParams(raw map[string]string) (call.Params, error) {
	var p call.Params
	for name, v := range raw {
		u, err := url.PathUnescape(v)
		if err != nil {
			return p, fmt.Errorf("%w: %s id %s is not a valid escaped path segment", api.ErrInvalid, name, call.Quote(v))
		}
		switch name {
		case "tenant":
			p.Tenant = u
		case "thread":
			p.Thread = u
		case "exec":
			p.Exec = u
		case "job":
			p.Job = u
		case "port":
			p.Port = u
		}
	}
	return p, nil
}

// writeError answers err as JSON with the status of its class, and logs
// the refusal with the thread and the path.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, p call.Params, err error) {
	status, code := call.Classify(err)
	if errors.Is(err, admit.ErrLimit) {
		// A refusal, not a failure: a warning, as every refusal.
		g.metrics.APIError(code)
		g.log.Warn("refused: limit", "method", r.Method, "path", call.Clip(r.URL.EscapedPath()),
			"tenant", call.Clip(p.Tenant), "thread", call.Clip(p.Thread), "status", status, "code", code, "error", err)
		w.Header().Set("Retry-After", admit.RetryAfterHeader())
		// The body, if any, was not read; and a refused client is
		// best given its descriptor back.
		w.Header().Set("Connection", "close")
		call.WriteJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: err.Error()}})
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
		g.metrics.APIError(code)
		call.WriteJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: call.BoundMessage(err.Error())}})
		return
	}
	g.writeErrorCode(w, r, p, status, code, err.Error())
}

// capacityRefusal says whether err refuses a new thread past a limit of
// the server (package threadlimit) or a jail past --max-jails.
func capacityRefusal(err error) bool {
	var tr *threadlimit.Refusal
	var jr *jails.BoundError
	return errors.As(err, &tr) || errors.As(err, &jr)
}

func (g *Gateway) writeErrorCode(w http.ResponseWriter, r *http.Request, p call.Params, status int, code, msg string) {
	g.metrics.APIError(code)
	args := []any{"method", r.Method, "path", call.Clip(r.URL.EscapedPath()), "tenant", call.Clip(p.Tenant), "thread", call.Clip(p.Thread),
		"status", status, "code", code, "error", call.Clip(msg)}
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
	// input through call.Quote, and is cut here whatever it quotes.
	call.WriteJSON(w, status, api.ErrorBody{Error: &api.APIError{Code: code, Message: call.BoundMessage(msg)}})
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
