package api

import (
	"errors"
	"fmt"
	"testing"
)

// TestAPIErrorIs: an error answer matches the sentinel of its code, and
// only that one, also when wrapped; an unknown code matches none.
func TestAPIErrorIs(t *testing.T) {
	sentinels := []error{ErrInvalid, ErrNotFound, ErrConflict, ErrPinned, ErrBusy, ErrClosed, ErrUnavailable,
		ErrForbidden, ErrGone, ErrStale, ErrNoMatch, ErrOutside, ErrFenced, ErrJobLimit, ErrNoSpace, ErrQuota}
	for _, c := range []struct {
		code string
		want error
	}{
		{CodeInvalid, ErrInvalid}, {CodeTooLarge, ErrInvalid}, {CodeMethodNotAllowed, ErrInvalid},
		{CodeNotFound, ErrNotFound}, {CodeConflict, ErrConflict}, {CodePinned, ErrPinned}, {CodeBusy, ErrBusy},
		{CodeClosed, ErrClosed}, {CodeUnavailable, ErrUnavailable}, {CodeForbidden, ErrForbidden},
		{CodeGone, ErrGone}, {CodeStale, ErrStale}, {CodeNoMatch, ErrNoMatch}, {CodeOutside, ErrOutside},
		{CodeFenced, ErrFenced}, {CodeJobLimit, ErrJobLimit}, {CodeNoSpace, ErrNoSpace}, {CodeQuota, ErrQuota},
		{CodeInternal, nil}, {CodeTimeout, nil}, {"unknown", nil},
	} {
		err := fmt.Errorf("call: %w", &APIError{Status: 500, Code: c.code, Message: "m"})
		for _, s := range sentinels {
			if got := errors.Is(err, s); got != (s == c.want) {
				t.Errorf("code %s: errors.Is(err, %v) = %v", c.code, s, got)
			}
		}
	}
	if CodeClosed == CodeUnavailable {
		t.Errorf("a closing daemon and an unavailable store share the code %q", CodeClosed)
	}
}
