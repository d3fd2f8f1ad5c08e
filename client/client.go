package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/meta"
)

// Client speaks the daemon's API over its Unix socket. The zero value is
// not usable; make one with New. It is safe for concurrent use.
type Client struct {
	socket string
	tr     *transport
}

// New returns a client of the daemon listening at socketPath. It
// connects on first use.
func New(socketPath string) *Client {
	return &Client{socket: socketPath, tr: &transport{socket: socketPath}}
}

// CloseIdleConnections closes the client's idle connections.
func (c *Client) CloseIdleConnections() { c.tr.closeIdle() }

// Bind binds a thread (or returns its binding if it is bound).
func (c *Client) Bind(ctx context.Context, tenant, thread string) (api.BindResponse, error) {
	var out api.BindResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/bind", nil, &out)
	return out, err
}

// BindWith binds a thread and gives it settings (see api.BindRequest).
func (c *Client) BindWith(ctx context.Context, tenant, thread string, s meta.Settings) (api.BindResponse, error) {
	var out api.BindResponse
	err := c.doLong(ctx, methodPost, threadPath(tenant, thread)+"/bind", api.BindRequest{Settings: &s}, &out)
	return out, err
}

// SetNetwork replaces a thread's egress rules, its other settings kept; a
// running jail follows them at once.
func (c *Client) SetNetwork(ctx context.Context, tenant, thread string, e meta.Egress) (api.ThreadInfo, error) {
	var out api.BindResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/network", nil, e, &out)
	return out.Binding, err
}

// Thread returns a thread's binding; an error matching api.ErrNotFound if it
// has none.
func (c *Client) Thread(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	var out api.ThreadResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread), nil, nil, &out)
	return out.Binding, err
}

// RegisterRun makes a process and its descendants act as a run.
func (c *Client) RegisterRun(ctx context.Context, tenant, thread string, pid int, run string) error {
	return c.do(ctx, methodPost, threadPath(tenant, thread)+"/runs", nil, api.RunRequest{Pid: pid, Run: run}, &api.RunResponse{})
}

// EndRun forgets a run: its processes and read records.
func (c *Client) EndRun(ctx context.Context, tenant, thread, run string) error {
	return c.do(ctx, methodPost, threadPath(tenant, thread)+"/runs/end", nil, api.RunRequest{Run: run}, &api.RunResponse{})
}

// Threads lists the bindings of every tenant, following the daemon's
// pages to the end.
func (c *Client) Threads(ctx context.Context) ([]api.ThreadInfo, error) {
	return c.allThreads(ctx, nil)
}

// TenantThreads lists the bindings of one tenant ("" is the default one),
// following the daemon's pages to the end.
func (c *Client) TenantThreads(ctx context.Context, tenant string) ([]api.ThreadInfo, error) {
	return c.allThreads(ctx, &tenant)
}

// ThreadsPage lists one page of bindings, ordered by tenant then thread:
// of tenant only if it is not nil; at most limit (0: the daemon's
// default, api.ThreadsPageDefault); after cursor, the NextCursor of the
// page before ("": from the first). The answer's NextCursor is "" on the
// last page.
func (c *Client) ThreadsPage(ctx context.Context, tenant *string, limit int, cursor string) (api.ThreadsResponse, error) {
	q := url.Values{}
	if tenant != nil {
		q.Set("tenant", *tenant)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out api.ThreadsResponse
	err := c.do(ctx, methodGet, "/v1/threads", q, nil, &out)
	return out, err
}

// allThreads reads every page. The first asks with no limit, so a daemon
// from before paging (which refuses ?limit=) answers it whole; the rest
// ask for the largest pages.
func (c *Client) allThreads(ctx context.Context, tenant *string) ([]api.ThreadInfo, error) {
	var all []api.ThreadInfo
	limit, cursor := 0, ""
	for {
		page, err := c.ThreadsPage(ctx, tenant, limit, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Bindings...)
		if page.NextCursor == "" {
			return all, nil
		}
		if page.NextCursor == cursor || len(page.Bindings) == 0 {
			return nil, errors.New("list threads: the daemon's pages do not advance")
		}
		limit, cursor = api.ThreadsPageMax, page.NextCursor
	}
}

// CloseThread unmounts a thread and records it as closed.
func (c *Client) CloseThread(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	var out api.ThreadResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/close", nil, nil, &out)
	return out.Binding, err
}

// DeleteThread unmounts a thread, removes its folder and its record.
func (c *Client) DeleteThread(ctx context.Context, tenant, thread string) error {
	return c.doLong(ctx, methodDelete, threadPath(tenant, thread), nil, &api.DeleteResponse{})
}

// Mount makes an inspection mount.
func (c *Client) Mount(ctx context.Context, req api.MountRequest) (api.MountInfo, error) {
	var out api.MountResponse
	err := c.do(ctx, methodPost, "/v1/mounts", nil, req, &out)
	return out.Mount, err
}

// Mounts lists the inspection mounts.
func (c *Client) Mounts(ctx context.Context) ([]api.MountInfo, error) {
	var out api.MountsResponse
	err := c.do(ctx, methodGet, "/v1/mounts", nil, nil, &out)
	return out.Mounts, err
}

// Unmount takes down the inspection mount at path.
func (c *Client) Unmount(ctx context.Context, path string) error {
	return c.do(ctx, methodDelete, "/v1/mounts", url.Values{"path": {path}}, nil, &api.UnmountResponse{})
}

// Events streams the gateway's events to fn, one at a time, in the order
// the gateway emitted them. thread "" means every thread; tenant "" means
// every tenant, unless thread is set: then, as in every call, it is the
// default tenant. A missed event (Type api.EventMissed) says how many events
// this stream lost because it fell behind.
//
// It returns when ctx is done (ctx's error), when fn returns an error
// (that error, as it is), or when the stream ends: an error matching
// api.ErrClosed when the gateway ended it because it is shutting down,
// another error when the connection broke.
func (c *Client) Events(ctx context.Context, tenant, thread string, fn func(api.Event) error) error {
	return c.EventsWith(ctx, EventsQuery{Tenant: tenant, Thread: thread}, fn)
}

// EventsQuery chooses the events of EventsWith.
type EventsQuery struct {
	Tenant, Thread string
	// Prefix passes only the file events of paths under it.
	Prefix string
	// Since, if set, replays the kept events after that seq first (and a
	// missed event for those no longer kept).
	Since *uint64
}

// EventsWith is Events with a path prefix and a replay.
func (c *Client) EventsWith(ctx context.Context, eq EventsQuery, fn func(api.Event) error) error {
	return c.EventLines(ctx, eq, func(line []byte, _ bool) error {
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("GET /v1/events: read event stream: %w", err)
		}
		return fn(ev)
	})
}

// MaxEventLine bounds one line of the event stream: a checkpoint's event
// lists up to api.MaxEventPaths paths, the longest kind.
const MaxEventLine = 16 << 20

// EventLines is EventsWith for a caller that passes the events on as they
// came: fn gets each event's line as the gateway sent it (one JSON object
// and its newline; valid until fn returns), and more, which is true when
// the next line has already arrived, so a caller that buffers its output
// can flush when it is false.
func (c *Client) EventLines(ctx context.Context, eq EventsQuery, fn func(line []byte, more bool) error) error {
	const path = "/v1/events"
	q := url.Values{}
	if eq.Tenant != "" {
		q.Set("tenant", eq.Tenant)
	}
	if eq.Thread != "" {
		q.Set("thread", eq.Thread)
	}
	if eq.Prefix != "" {
		q.Set("prefix", eq.Prefix)
	}
	if eq.Since != nil {
		q.Set("since", strconv.FormatUint(*eq.Since, 10))
	}
	resp, err := c.send(ctx, methodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readEventLine(br)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, io.EOF):
			// The gateway ends a stream cleanly only when it closes.
			return fmt.Errorf("GET %s: the gateway ended the event stream: %w", path, api.ErrClosed)
		case err != nil:
			return fmt.Errorf("GET %s: read event stream: %w", path, err)
		}
		if err := fn(line, br.Buffered() > 0); err != nil {
			return err
		}
	}
}

// readEventLine reads one line of the event stream, its newline included:
// io.EOF at a clean end, io.ErrUnexpectedEOF for a line cut short.
func readEventLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	long := append([]byte(nil), line...)
	for {
		line, err = br.ReadSlice('\n')
		long = append(long, line...)
		if len(long) > MaxEventLine {
			return nil, fmt.Errorf("an event line longer than %d bytes", MaxEventLine)
		}
		switch {
		case err == nil:
			return long, nil
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

// Exec runs a command in a thread's jail, writes its output to stdout and
// stderr (either may be nil) as it comes, and returns the command's exit
// code (124 when it ran out of time).
func (c *Client) Exec(ctx context.Context, tenant, thread string, req api.ExecRequest, stdout, stderr io.Writer) (int, error) {
	return c.ExecStream(ctx, tenant, thread, req, nil, stdout, stderr)
}

// ExecStream is Exec that also tells onID, if set, the running command's
// id as soon as it starts (for ExecStdin and ExecResize). A terminal's
// output goes to stdout.
func (c *Client) ExecStream(ctx context.Context, tenant, thread string, req api.ExecRequest, onID func(string), stdout, stderr io.Writer) (int, error) {
	end, err := c.ExecEnd(ctx, tenant, thread, req, onID, stdout, stderr)
	if end.Exit == nil {
		return -1, err
	}
	return *end.Exit, err
}

// ExecEnd is ExecStream that returns the answer's last frame, with the
// exit code and, when the gateway or the kernel ended the command, its
// Reason and Note. A frame without Exit comes with an error. A notice
// on the thread's workspace (api.ExecFrame.Notice: the thread moved to
// this server) goes to stderr first, on a line of its own after
// "warren: ".
func (c *Client) ExecEnd(ctx context.Context, tenant, thread string, req api.ExecRequest, onID func(string), stdout, stderr io.Writer) (api.ExecFrame, error) {
	path := threadPath(tenant, thread) + "/exec"
	resp, err := c.send(ctx, methodPost, path, nil, req)
	if err != nil {
		return api.ExecFrame{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var f api.ExecFrame
		if err := dec.Decode(&f); err != nil {
			if ctx.Err() != nil {
				return api.ExecFrame{}, ctx.Err()
			}
			return api.ExecFrame{}, fmt.Errorf("POST %s: the answer ended before the command did: %w", path, err)
		}
		if f.Notice != "" && stderr != nil {
			io.WriteString(stderr, "warren: "+f.Notice+"\n")
		}
		switch {
		case f.Background != "":
			io.Copy(io.Discard, resp.Body)
			return api.ExecFrame{}, &api.MovedError{Job: f.Background}
		case f.Exit != nil:
			// Read the answer to its end, so that its connection is
			// used again.
			io.Copy(io.Discard, resp.Body)
			if f.Error != "" {
				return f, fmt.Errorf("POST %s: %s", path, f.Error)
			}
			return f, nil
		case f.ID != "" && onID != nil:
			onID(f.ID)
		case (f.Stream == "stdout" || f.Stream == "tty") && stdout != nil:
			io.WriteString(stdout, f.Data)
		case f.Stream == "stderr" && stderr != nil:
			io.WriteString(stderr, f.Data)
		}
	}
}

// Background moves a running command to the background as a job.
func (c *Client) Background(ctx context.Context, tenant, thread, execID string, req api.BackgroundRequest) (api.JobInfo, error) {
	var out api.JobResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/exec/"+escapeID(execID)+"/background", nil, req, &out)
	return out.Job, err
}

// Unpin moves a thread whose owner died to this gateway at once.
func (c *Client) Unpin(ctx context.Context, tenant, thread string) (api.ThreadInfo, error) {
	var out api.ThreadResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/unpin", nil, nil, &out)
	return out.Binding, err
}

// Hosts lists the hosts the store knows.
func (c *Client) Hosts(ctx context.Context) ([]meta.Host, error) {
	var out api.HostsResponse
	err := c.do(ctx, methodGet, "/v1/hosts", nil, nil, &out)
	return out.Hosts, err
}

// Usage reports what a thread uses on the server that serves it.
func (c *Client) Usage(ctx context.Context, tenant, thread string) (api.Usage, error) {
	var out api.UsageResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread)+"/usage", nil, nil, &out)
	return out.Usage, err
}

// Health asks whether the daemon answers.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var out api.Health
	err := c.do(ctx, methodGet, "/healthz", nil, nil, &out)
	return out, err
}

// Ready asks whether the daemon may take work, with each check. A daemon
// that may not is an answer (Ready false, its 503), not an error.
func (c *Client) Ready(ctx context.Context) (api.Readiness, error) {
	var out api.Readiness
	resp, err := c.roundTrip(ctx, methodGet, "/readyz", nil, "", nil)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != statusOK && resp.StatusCode != statusServiceUnavailable {
		return out, answerError(methodGet, "/readyz", resp)
	}
	return out, decodeAnswer(methodGet, "/readyz", resp, &out)
}

// Metrics returns the daemon's metrics in Prometheus' text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.send(ctx, methodGet, "/metrics", nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return "", fmt.Errorf("GET /metrics: read answer: %w", err)
	}
	return string(b), nil
}

// Spawn starts a background job.
func (c *Client) Spawn(ctx context.Context, tenant, thread string, req api.SpawnRequest) (api.JobInfo, error) {
	var out api.JobResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/jobs", nil, req, &out)
	return out.Job, err
}

// Jobs lists a thread's jobs.
func (c *Client) Jobs(ctx context.Context, tenant, thread string) ([]api.JobInfo, error) {
	var out api.JobsResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread)+"/jobs", nil, nil, &out)
	return out.Jobs, err
}

// Job returns one job.
func (c *Client) Job(ctx context.Context, tenant, thread, id string) (api.JobInfo, error) {
	var out api.JobResponse
	err := c.do(ctx, methodGet, threadPath(tenant, thread)+"/jobs/"+escapeID(id), nil, nil, &out)
	return out.Job, err
}

// StopJob stops a job (SIGTERM, then SIGKILL after grace; 0 means the
// gateway's default) and returns it ended.
func (c *Client) StopJob(ctx context.Context, tenant, thread, id string, grace time.Duration) (api.JobInfo, error) {
	var out api.JobResponse
	err := c.do(ctx, methodPost, threadPath(tenant, thread)+"/jobs/"+escapeID(id)+"/stop", nil,
		api.StopJobRequest{GraceSeconds: grace.Seconds()}, &out)
	return out.Job, err
}

// JobStdin sends input to a job; closeIt ends its input after data.
func (c *Client) JobStdin(ctx context.Context, tenant, thread, id, data string, closeIt bool) error {
	return c.do(ctx, methodPost, threadPath(tenant, thread)+"/jobs/"+escapeID(id)+"/stdin", nil,
		api.ExecStdinRequest{Data: data, Close: closeIt}, &api.JobResponse{})
}

// JobOutput reads a job's output, both streams merged, from offset
// (negative: from the oldest byte kept) and calls fn with each frame; with
// follow it goes on until the job ends. It returns after the last frame.
// JobOutputStream reads one stream alone.
func (c *Client) JobOutput(ctx context.Context, tenant, thread, id string, offset int64, follow bool, fn func(api.JobFrame) error) error {
	return c.JobOutputStream(ctx, tenant, thread, id, "", offset, follow, fn)
}

// ExecStdin sends input to a running command (see api.ExecRequest.OpenStdin);
// closeIt ends its input after data.
func (c *Client) ExecStdin(ctx context.Context, tenant, thread, id, data string, closeIt bool) error {
	return c.do(ctx, methodPost, threadPath(tenant, thread)+"/exec/"+escapeID(id)+"/stdin", nil,
		api.ExecStdinRequest{Data: data, Close: closeIt}, &api.ExecAck{})
}

// ExecResize resizes a running command's terminal.
func (c *Client) ExecResize(ctx context.Context, tenant, thread, id string, rows, cols uint16) error {
	return c.do(ctx, methodPost, threadPath(tenant, thread)+"/exec/"+escapeID(id)+"/resize", nil,
		api.ExecResizeRequest{Rows: rows, Cols: cols}, &api.ExecAck{})
}

// Version returns the daemon's build and what its kernel offers it.
func (c *Client) Version(ctx context.Context) (api.Version, error) {
	var v api.Version
	err := c.do(ctx, methodGet, "/v1/version", nil, nil, &v)
	return v, err
}

// threadPath is the escaped API path of a thread.
func threadPath(tenant, thread string) string {
	return "/v1/tenants/" + escapeID(tenant) + "/threads/" + escapeID(thread)
}

// escapeID escapes one id as one path segment. Unlike url.PathEscape it
// escapes '.' too, so "." and ".." never appear as segments that a proxy
// or a client library might clean away.
func escapeID(id string) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&0xf])
		}
	}
	return b.String()
}

// do sends one request and decodes a 200 answer into out, or an error
// answer into an *api.APIError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeAnswer(method, path, resp, out)
}

// decodeAnswer decodes the JSON of a 200 answer into out.
func decodeAnswer(method, path string, resp *response, out any) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// maxAnswerBytes bounds how much of one answer the client reads.
const maxAnswerBytes = 64 << 20

// send sends one request and returns a 200 answer for the caller to read
// and close. Any other answer is read, closed and returned as an error: an
// *api.APIError.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body any) (*response, error) {
	if body == nil {
		return c.sendBody(ctx, method, path, q, "", nil)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: encode request: %w", method, path, err)
	}
	return c.sendBody(ctx, method, path, q, "application/json", bytes.NewReader(b))
}

// sendBody is send with a body of its own (nil: none) of the content
// type ctype.
func (c *Client) sendBody(ctx context.Context, method, path string, q url.Values, ctype string, body io.Reader) (*response, error) {
	resp, err := c.roundTrip(ctx, method, path, q, ctype, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == statusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, answerError(method, path, resp)
}

// roundTrip sends one request and returns its answer, whatever its
// status, for the caller to read and close.
func (c *Client) roundTrip(ctx context.Context, method, path string, q url.Values, ctype string, body io.Reader) (*response, error) {
	// path is escaped already (escapeID): ids reach the daemon intact.
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	resp, err := c.tr.roundTrip(ctx, method, target, ctype, body)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	return resp, nil
}

// answerError reads an error answer and returns it as an *api.APIError.
func answerError(method, path string, resp *response) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == nil {
		return &api.APIError{Status: resp.StatusCode, Code: api.CodeInternal,
			Message: fmt.Sprintf("%s %s: status %s: %s", method, path, resp.Status, bytes.TrimSpace(data))}
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}
