package gateway

import (
	"errors"
	"net/http"
	"syscall"

	"warren/meta"
)

// Sentinel errors. The API maps each to one status and code (see
// classify); the Client maps them back, so callers on either side of the
// socket branch with errors.Is.
var (
	// ErrInvalid means the request itself is wrong: a malformed id, body or
	// path. Retrying it unchanged cannot succeed.
	ErrInvalid = errors.New("gateway: invalid request")
	// ErrNotFound means no binding or inspection mount exists for the key.
	ErrNotFound = errors.New("gateway: not found")
	// ErrConflict means the request contradicts the current state, e.g. an
	// inspection mount at a path that is already served.
	ErrConflict = errors.New("gateway: conflict")
	// ErrPinned means another host owns the thread's workspace.
	ErrPinned = errors.New("gateway: pinned to another host")
	// ErrBusy means an unmount failed because the mount is in use.
	ErrBusy = errors.New("gateway: mount busy")
	// ErrClosed means the gateway is shutting down.
	ErrClosed = errors.New("gateway: closed")
	// ErrForbidden means the caller may not do this.
	ErrForbidden = errors.New("gateway: forbidden")
	// ErrGone means the thread's workspace folder no longer exists: the
	// tools cannot work on it, and a new empty folder is not made in its
	// place (that would look like a workspace whose files were lost).
	ErrGone = errors.New("gateway: workspace gone")
	// ErrStale means a write based on a read older than the file: the
	// agent must read the file again.
	ErrStale = errors.New("gateway: stale read")
	// ErrNoMatch means an edit's text is not in the file, or is there
	// more than once and the edit asked for one.
	ErrNoMatch = errors.New("gateway: edit text not matched")
	// ErrOutside means a path leads out of the thread's workspace.
	ErrOutside = errors.New("gateway: outside the workspace")
	// ErrTooLarge means a file over the file API's bound.
	ErrTooLarge = errors.New("gateway: file too large")
	// ErrFenced means this gateway's lease lapsed: it serves no pinned
	// thread until it renews it.
	ErrFenced = errors.New("gateway: lease lapsed")
	// ErrJobLimit means a thread runs as many background jobs as it may.
	ErrJobLimit = errors.New("gateway: job limit")
	// errBodyTimeout means a request's body did not arrive within
	// Config.BodyTimeout.
	errBodyTimeout = errors.New("gateway: request body timed out")
	// ErrNoSpace means the metadata store's disk is (nearly) full: the
	// write was refused, reads go on (meta.ErrNoSpace).
	ErrNoSpace = errors.New("gateway: no space left for the metadata store")
)

// Error codes of the API, one per class of failure.
const (
	codeInvalid          = "invalid"
	codeNotFound         = "not_found"
	codeConflict         = "conflict"
	codePinned           = "pinned"
	codeBusy             = "busy"
	codeClosed           = "unavailable"
	codeForbidden        = "forbidden"
	codeGone             = "gone"
	codeTooLarge         = "too_large"
	codeStale            = "stale"
	codeNoMatch          = "no_match"
	codeOutside          = "outside"
	codeJobLimit         = "job_limit"
	codeNoSpace          = "no_space"
	codeFenced           = "fenced"
	codeMethodNotAllowed = "method_not_allowed"
	codeInternal         = "internal"
	codeTimeout          = "timeout"
)

// errorClasses is the one table from errors to statuses and codes; it is
// never written. The first entry whose sentinel matches wins.
var errorClasses = []struct {
	sentinel error
	status   int
	code     string
}{
	{ErrInvalid, http.StatusBadRequest, codeInvalid},
	{errBodyTimeout, http.StatusRequestTimeout, codeTimeout},
	{ErrNotFound, http.StatusNotFound, codeNotFound},
	{meta.ErrNotFound, http.StatusNotFound, codeNotFound},
	{ErrPinned, http.StatusConflict, codePinned},
	{ErrBusy, http.StatusConflict, codeBusy},
	{ErrConflict, http.StatusConflict, codeConflict},
	{meta.ErrConflict, http.StatusConflict, codeConflict},
	{meta.ErrExists, http.StatusConflict, codeConflict},
	{ErrForbidden, http.StatusForbidden, codeForbidden},
	{ErrGone, http.StatusGone, codeGone},
	{ErrStale, http.StatusConflict, codeStale},
	{ErrNoMatch, http.StatusUnprocessableEntity, codeNoMatch},
	{ErrOutside, http.StatusForbidden, codeOutside},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, codeTooLarge},
	{ErrJobLimit, http.StatusTooManyRequests, codeJobLimit},
	{ErrFenced, http.StatusServiceUnavailable, codeFenced},
	{ErrClosed, http.StatusServiceUnavailable, codeClosed},
	{meta.ErrClosed, http.StatusServiceUnavailable, codeClosed},
	// The metadata store did not answer in time (an etcd election): a
	// retry will do.
	{meta.ErrUnavailable, http.StatusServiceUnavailable, codeClosed},
	{ErrNoSpace, http.StatusInsufficientStorage, codeNoSpace},
	{meta.ErrNoSpace, http.StatusInsufficientStorage, codeNoSpace},
	// A folder of the gateway's own (a workspace, a mount point) could
	// not be made on a full disk.
	{syscall.ENOSPC, http.StatusInsufficientStorage, codeNoSpace},
	// A name or an argument list too long for the kernel: the request's
	// input cannot work. The bounds of input.go refuse it first; these
	// are the backstop.
	{syscall.ENAMETOOLONG, http.StatusBadRequest, codeInvalid},
	{syscall.E2BIG, http.StatusBadRequest, codeInvalid},
	// A command too large for the jail's socket (jail.send).
	{syscall.EMSGSIZE, http.StatusBadRequest, codeInvalid},
}

// classify returns the status and code for err.
func classify(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, codeTooLarge
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.sentinel) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, codeInternal
}

// sentinelFor maps an API error code back to the package's sentinel, for
// the Client.
func sentinelFor(code string) error {
	switch code {
	case codeInvalid, codeTooLarge, codeMethodNotAllowed:
		return ErrInvalid
	case codeStale:
		return ErrStale
	case codeNoMatch:
		return ErrNoMatch
	case codeOutside:
		return ErrOutside
	case codeNotFound:
		return ErrNotFound
	case codeConflict:
		return ErrConflict
	case codePinned:
		return ErrPinned
	case codeBusy:
		return ErrBusy
	case codeClosed:
		return ErrClosed
	case codeForbidden:
		return ErrForbidden
	case codeGone:
		return ErrGone
	case codeJobLimit:
		return ErrJobLimit
	case codeFenced:
		return ErrFenced
	case codeNoSpace:
		return ErrNoSpace
	}
	return nil
}

// APIError is an error answer of the API, as the Client sees it. It matches
// the gateway's sentinel of its code with errors.Is.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	return e.Message + " (" + e.Code + ")"
}

// Is lets errors.Is(err, gateway.ErrNotFound) work on the client side.
func (e *APIError) Is(target error) bool {
	s := sentinelFor(e.Code)
	return s != nil && s == target
}

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error *APIError `json:"error"`
}

// toolError is a refusal whose message is meant for the agent as it is,
// without the gateway's prefixes; it matches its sentinel.
type toolError struct {
	sentinel error
	msg      string
}

func (e *toolError) Error() string        { return e.msg }
func (e *toolError) Is(target error) bool { return target == e.sentinel }
