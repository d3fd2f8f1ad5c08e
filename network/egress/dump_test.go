package egress

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestDumpAgain: an interrupted dump is made again until whole, a bounded
// number of times; another error is given at once.
func TestDumpAgain(t *testing.T) {
	calls := 0
	v, err := Dump(func() (int, error) {
		calls++
		if calls < 3 {
			return 0, netlink.ErrDumpInterrupted
		}
		return 42, nil
	})
	if v != 42 || err != nil || calls != 3 {
		t.Errorf("twice interrupted: %d, %v after %d calls; want 42 after 3", v, err, calls)
	}
	calls = 0
	if _, err := Dump(func() (int, error) { calls++; return 0, netlink.ErrDumpInterrupted }); !errors.Is(err, netlink.ErrDumpInterrupted) || calls != dumpTries {
		t.Errorf("always interrupted: %v after %d calls; want the error after %d", err, calls, dumpTries)
	}
	other := errors.New("refused")
	calls = 0
	if _, err := Dump(func() (int, error) { calls++; return 0, other }); err != other || calls != 1 {
		t.Errorf("another error: %v after %d calls", err, calls)
	}
}
