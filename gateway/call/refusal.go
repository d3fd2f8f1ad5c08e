package call

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"warren/api"
	"warren/gateway/admit"
	"warren/meta"
)

// The sentinel errors and the error codes are the API's (package api);
// the rooms use them from there. ErrBodyTimeout is the daemon's own.

// ErrBodyTimeout means a request's body did not arrive within the body
// timeout (408).
var ErrBodyTimeout = errors.New("gateway: request body timed out")

// errorClasses is the one table from errors to statuses and codes; it is
// never written. The first entry whose sentinel matches wins.
var errorClasses = []struct {
	sentinel error
	status   int
	code     string
}{
	{api.ErrInvalid, http.StatusBadRequest, api.CodeInvalid},
	{ErrBodyTimeout, http.StatusRequestTimeout, api.CodeTimeout},
	{api.ErrNotFound, http.StatusNotFound, api.CodeNotFound},
	{meta.ErrNotFound, http.StatusNotFound, api.CodeNotFound},
	{api.ErrPinned, http.StatusConflict, api.CodePinned},
	{api.ErrBusy, http.StatusConflict, api.CodeBusy},
	{api.ErrConflict, http.StatusConflict, api.CodeConflict},
	{meta.ErrConflict, http.StatusConflict, api.CodeConflict},
	{meta.ErrExists, http.StatusConflict, api.CodeConflict},
	{api.ErrForbidden, http.StatusForbidden, api.CodeForbidden},
	{api.ErrGone, http.StatusGone, api.CodeGone},
	{api.ErrStale, http.StatusConflict, api.CodeStale},
	{api.ErrNoMatch, http.StatusUnprocessableEntity, api.CodeNoMatch},
	{api.ErrOutside, http.StatusForbidden, api.CodeOutside},
	{api.ErrTooLarge, http.StatusRequestEntityTooLarge, api.CodeTooLarge},
	{api.ErrJobLimit, http.StatusTooManyRequests, api.CodeJobLimit},
	{api.ErrFenced, http.StatusServiceUnavailable, api.CodeFenced},
	{api.ErrClosed, http.StatusServiceUnavailable, api.CodeClosed},
	{meta.ErrClosed, http.StatusServiceUnavailable, api.CodeClosed},
	// The metadata store did not answer in time (an etcd election): a
	// retry will do, so the code is not the one of a closing gateway,
	// after which the client must give up or connect anew.
	{meta.ErrUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable},
	// The store, or a limit of this server's (a new thread past
	// --max-threads or a reserve, package threadlimit; a jail past
	// --max-jails with every jail busy, package jails): the daemon is up,
	// and the call may work after Retry-After.
	{api.ErrUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable},
	// Too many requests of a kind held at once (package admit): a retry
	// after Retry-After will do.
	{admit.ErrLimit, http.StatusServiceUnavailable, api.CodeUnavailable},
	{api.ErrNoSpace, http.StatusInsufficientStorage, api.CodeNoSpace},
	{meta.ErrNoSpace, http.StatusInsufficientStorage, api.CodeNoSpace},
	// A thread's disk quota refused a file of the file API.
	{api.ErrQuota, http.StatusInsufficientStorage, api.CodeQuota},
	// A quota group's limit refused a write of the daemon's own: a
	// checkpoint's objects past the reserve (package quota).
	{syscall.EDQUOT, http.StatusInsufficientStorage, api.CodeQuota},
	// A folder of the daemon's own (a workspace, a mount point) could
	// not be made on a full disk.
	{syscall.ENOSPC, http.StatusInsufficientStorage, api.CodeNoSpace},
	// A name or an argument list too long for the kernel: the request's
	// input cannot work. The bounds of input.go refuse it first; these
	// are the backstop.
	{syscall.ENAMETOOLONG, http.StatusBadRequest, api.CodeInvalid},
	{syscall.E2BIG, http.StatusBadRequest, api.CodeInvalid},
	// A command too large for the jail's socket (jail.send).
	{syscall.EMSGSIZE, http.StatusBadRequest, api.CodeInvalid},
}

// Classify returns the status and code for err.
func Classify(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.sentinel) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, api.CodeInternal
}

// Refuse returns a refusal whose message is meant for the agent as it
// is, without the daemon's prefixes; it matches sentinel (an api.Err...),
// which gives its status and code.
func Refuse(sentinel error, msg string) error {
	return &refusal{sentinel: sentinel, msg: msg}
}

type refusal struct {
	sentinel error
	msg      string
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == e.sentinel }

// Busy marks an unmount that failed because its mount is in use (EBUSY)
// as api.ErrBusy (409 busy); any other error is returned as it is.
func Busy(err error) error {
	if errors.Is(err, syscall.EBUSY) {
		return fmt.Errorf("%w: %w", api.ErrBusy, err)
	}
	return err
}

// NoThread is the refusal of op, a call that never binds, on thread k,
// which has no record (it was never bound, or was deleted): 404
// not_found, and nothing is made, so a typo in an id makes no workspace.
func NoThread(k meta.ThreadKey, op string) error {
	return Refuse(api.ErrNotFound, fmt.Sprintf("There is no thread %s: it was never bound, or was deleted (%s makes none; bind it first).", KeyName(k), op))
}
