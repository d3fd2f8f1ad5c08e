package api

import "errors"

// Sentinel errors. The daemon maps each to one status and code; an
// *APIError matches the sentinel of its code, so callers on either side of
// the socket branch with errors.Is.
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
	// ErrClosed means the daemon is shutting down: this one will not
	// answer again. A client gives up, or connects again once a daemon
	// serves the socket anew.
	ErrClosed = errors.New("gateway: closed")
	// ErrUnavailable means the metadata store did not answer in time (an
	// etcd cluster electing a leader, say), or a limit of the server
	// refused a new thread or jail (the message names it): the daemon is
	// up and the same call may work if retried after a pause.
	ErrUnavailable = errors.New("gateway: metadata store unavailable")
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
	// ErrTooLarge means a file over the file API's bound, or a checkpoint
	// past one of the server's checkpoint limits (entries, depth, bytes
	// read; the message names it).
	ErrTooLarge = errors.New("gateway: file too large")
	// ErrFenced means the daemon's lease lapsed: it serves no pinned
	// thread until it renews it.
	ErrFenced = errors.New("gateway: lease lapsed")
	// ErrJobLimit means a thread runs as many background jobs as it may.
	ErrJobLimit = errors.New("gateway: job limit")
	// ErrNoSpace means a disk is (nearly) full: the metadata store's (the
	// write was refused, reads go on) or the workspace's (a file was not
	// written, and is as it was).
	ErrNoSpace = errors.New("gateway: no space left")
	// ErrQuota means the thread's disk quota is full: a file was not
	// written, and is as it was. Free space in the workspace, or raise
	// the thread's quota.
	ErrQuota = errors.New("gateway: disk quota full")
)

// Error codes of the API, one per class of failure: the "code" of an error
// answer (docs/api.md lists them with their statuses).
const (
	CodeInvalid          = "invalid"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodePinned           = "pinned"
	CodeBusy             = "busy"
	CodeClosed           = "closed"
	CodeUnavailable      = "unavailable"
	CodeForbidden        = "forbidden"
	CodeGone             = "gone"
	CodeTooLarge         = "too_large"
	CodeStale            = "stale"
	CodeNoMatch          = "no_match"
	CodeOutside          = "outside"
	CodeJobLimit         = "job_limit"
	CodeNoSpace          = "no_space"
	CodeQuota            = "quota"
	CodeFenced           = "fenced"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
	CodeTimeout          = "timeout"
)

// sentinelFor maps an error code to the sentinel an *APIError of that code
// matches, or nil.
func sentinelFor(code string) error {
	switch code {
	case CodeInvalid, CodeTooLarge, CodeMethodNotAllowed:
		return ErrInvalid
	case CodeStale:
		return ErrStale
	case CodeNoMatch:
		return ErrNoMatch
	case CodeOutside:
		return ErrOutside
	case CodeNotFound:
		return ErrNotFound
	case CodeConflict:
		return ErrConflict
	case CodePinned:
		return ErrPinned
	case CodeBusy:
		return ErrBusy
	case CodeClosed:
		return ErrClosed
	case CodeUnavailable:
		return ErrUnavailable
	case CodeForbidden:
		return ErrForbidden
	case CodeGone:
		return ErrGone
	case CodeJobLimit:
		return ErrJobLimit
	case CodeFenced:
		return ErrFenced
	case CodeNoSpace:
		return ErrNoSpace
	case CodeQuota:
		return ErrQuota
	}
	return nil
}

// APIError is an error answer of the API, as a client sees it. It matches
// the sentinel of its code with errors.Is.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	return e.Message + " (" + e.Code + ")"
}

// Is lets errors.Is(err, api.ErrNotFound) work on the client side.
func (e *APIError) Is(target error) bool {
	s := sentinelFor(e.Code)
	return s != nil && s == target
}

// ErrorBody is the JSON shape of every error answer.
type ErrorBody struct {
	Error *APIError `json:"error"`
}

// MovedError ends an exec whose command moved to the background: the job
// has the rest of its output and its end.
type MovedError struct {
	Job string
}

func (e *MovedError) Error() string { return "the command moved to the background as job " + e.Job }
