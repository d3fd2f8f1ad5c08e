package gateway

import (
	"errors"
	"net/http"
	"syscall"

	"warren/meta"
)

// The sentinel errors and the error codes are the API's (package api);
// wire.go names them here. errBodyTimeout is the gateway's own.

// errBodyTimeout means a request's body did not arrive within
// Config.BodyTimeout.
var errBodyTimeout = errors.New("gateway: request body timed out")

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
	// retry will do, so the code is not the one of a closing gateway,
	// after which the client must give up or connect anew.
	{meta.ErrUnavailable, http.StatusServiceUnavailable, codeUnavailable},
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

// toolError is a refusal whose message is meant for the agent as it is,
// without the gateway's prefixes; it matches its sentinel.
type toolError struct {
	sentinel error
	msg      string
}

func (e *toolError) Error() string        { return e.msg }
func (e *toolError) Is(target error) bool { return target == e.sentinel }
