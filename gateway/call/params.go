package call

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

	"warren/api"
)

// MaxBodyBytes bounds a request body; a larger one is answered 413.
const MaxBodyBytes = 1 << 20

// Params are the ids taken from a request's path, each unescaped on its
// own (see package gateway's route table).
type Params struct {
	Tenant, Thread string
	Exec           string // a running command's id, on .../exec/{exec}/...
	Job            string // a job's id, on .../jobs/{job}...
	Port           string // a jail's port, on .../ports/{port}
}

// Handler answers one call of the API: a value the router encodes as
// JSON, a Streamer, or an error the router answers (Classify).
type Handler func(r *http.Request, p Params) (any, error)

// Streamer is an answer that writes itself instead of being encoded as
// one JSON value: a stream that goes on after the headers (GET
// /v1/events). A streaming handler checks the request and takes what the
// stream needs before it returns one, so every refusal is still an error
// answered by the router like any other; once ServeStream runs the
// status is 200, and a failure can only end the stream.
type Streamer interface {
	ServeStream(w http.ResponseWriter, r *http.Request)
}

// DecodeBody decodes the request body as one JSON object into v, refusing
// unknown fields, a query and trailing data. An empty body is accepted if
// emptyOK; any other JSON value (null, an array, a number) is refused:
// decoded into a struct, null and an empty body would pass as an object
// of zero fields, which no caller means.
func DecodeBody(r *http.Request, v any, emptyOK bool) error {
	if err := NoQuery(r); err != nil {
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
		return BodyError(err)
	}
	if first != '{' {
		return fmt.Errorf("%w: the request body must be a JSON object", api.ErrInvalid)
	}
	dec := json.NewDecoder(br)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return BodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return BodyError(err)
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

// BodyError is the refusal of a body that could not be read: too large
// (413), too slow (408, ErrBodyTimeout) or not JSON (400).
func BodyError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("request body larger than %d bytes: %w", tooLarge.Limit, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the request body did not arrive in time", ErrBodyTimeout)
	}
	return fmt.Errorf("%w: malformed JSON body: %w", api.ErrInvalid, err)
}

// Query parses the query string, allowing only the named keys, each once.
func Query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed query: %w", api.ErrInvalid, err)
	}
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%w: unknown query parameter %s", api.ErrInvalid, Quote(k))
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: query parameter %s given %d times", api.ErrInvalid, Quote(k), len(vs))
		}
	}
	return q, nil
}

// NoQuery refuses a request with a query.
func NoQuery(r *http.Request) error {
	_, err := Query(r)
	return err
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	// Paths and ids are data: keep "<", ">" and "&" as they are.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing left to tell it
}

// Clip shortens what a client sent before it goes into a log line: a
// refused 60 KiB path is noise, its first bytes are enough to find it.
func Clip(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:max], len(s))
}
