package call

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/internal/progress"
)

// progressEvery is the least time between two progress frames: a restore
// reports once per file, a client wants to see it move.
const progressEvery = 100 * time.Millisecond

// WantsProgress says whether r asks for its answer as a progress stream
// (api.Progress): with the header Accept: application/x-ndjson, or the
// query progress=1 (or true). It takes progress out of r's query, so that
// the handler's own query and body checks see the rest.
func WantsProgress(r *http.Request) (bool, error) {
	want := false
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == api.ContentTypeNDJSON {
				want = true
			}
		}
	}
	if r.URL.RawQuery == "" {
		return want, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return false, fmt.Errorf("%w: malformed query: %w", api.ErrInvalid, err)
	}
	vs, ok := q["progress"]
	if !ok {
		return want, nil
	}
	if len(vs) > 1 {
		return false, fmt.Errorf("%w: query parameter \"progress\" given %d times", api.ErrInvalid, len(vs))
	}
	on, err := strconv.ParseBool(vs[0])
	if err != nil {
		return false, fmt.Errorf("%w: progress must be 1 or 0 (true or false), not %s", api.ErrInvalid, Quote(vs[0]))
	}
	delete(q, "progress")
	r.URL.RawQuery = q.Encode()
	return want || on, nil
}

// WithProgress runs the long call run, and answers it as a progress
// stream when r asks for one (WantsProgress), else as usual. run gets a
// context whose progress.Func the stream sends from; it returns the
// call's answer. A call that fails before its first report (bad input, a
// thread that does not exist) is answered as without the stream, with
// its status; once the stream started, an error is its last frame.
//
// run works on a goroutine of its own that the stream owns: the stream
// waits for it, even when the client has gone away (a restore runs to
// its end whatever its caller does).
func WithProgress(r *http.Request, run func(ctx context.Context) (any, error)) (any, error) {
	want, err := WantsProgress(r)
	if err != nil {
		return nil, err
	}
	if !want {
		return run(r.Context())
	}
	s := &progressStream{sink: progress.NewSink(), done: make(chan struct{})}
	ctx := progress.With(r.Context(), s.sink.Report)
	go func() {
		defer close(s.done)
		s.result, s.err = run(ctx)
	}()
	select {
	case <-s.done:
		if s.err != nil {
			return nil, s.err
		}
	case <-s.sink.Ready:
		s.pending = true
	}
	return s, nil
}

// progressStream is the answer of a long call run as a progress stream.
type progressStream struct {
	sink    *progress.Sink
	pending bool          // the first report came (WithProgress took its signal)
	done    chan struct{} // closed when the call returned
	result  any           // the call's answer; read after done
	err     error         // the call's error; read after done
}

func (s *progressStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", api.ContentTypeNDJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	gone := false // the client went away: the call runs on, unwatched
	send := func(v any) {
		if gone {
			return
		}
		if enc.Encode(v) != nil || rc.Flush() != nil {
			gone = true
		}
	}
	frame := func() {
		f := s.sink.Take()
		send(api.Progress{Done: f.Done, Total: f.Total, Phase: f.Phase})
	}
	if s.pending {
		frame()
	} else {
		_ = rc.Flush() // the headers: the client knows the call is under way
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	ready := s.sink.Ready
	for loop := true; loop; {
		select {
		case <-s.done:
			loop = false
		case <-ready:
			// Wait for the tick before the next frame: at most one
			// frame per progressEvery, the newest.
			ready = nil
		case <-tick.C:
			if ready == nil {
				frame()
				ready = s.sink.Ready
			}
		}
	}
	select {
	case <-s.sink.Ready:
		ready = nil
	default:
	}
	if ready == nil {
		frame() // the last report: the bar ends where the work did
	}
	if s.err != nil {
		_, code := Classify(s.err)
		send(api.ProgressEnd{Error: &api.APIError{Code: code, Message: BoundMessage(s.err.Error())}})
		return
	}
	var b bytes.Buffer
	renc := json.NewEncoder(&b)
	renc.SetEscapeHTML(false)
	if err := renc.Encode(s.result); err != nil {
		send(api.ProgressEnd{Error: &api.APIError{Code: api.CodeInternal, Message: "encode the answer: " + err.Error()}})
		return
	}
	send(api.ProgressEnd{Result: bytes.TrimSpace(b.Bytes())})
}
