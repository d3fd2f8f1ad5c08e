package jobs

import (
	"testing"
	"time"

	"warren/jail"
)

// TestEndReasonText: the units of the notes, and no reason without the
// gateway's or the kernel's word, whatever the exit code.
func TestEndReasonText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 300 * time.Millisecond: "300ms", 90 * time.Second: "1m30s",
		10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{64 << 20: "64 MiB", 2 << 30: "2 GiB", 1536 << 10: "1536 KiB", 1000: "1000 bytes"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
	for _, code := range []int{124, 137, 143, 1} {
		if r, n := endReason(jail.Ended{Exit: code}, nil, endCause{}, 64<<20, 64); r != "" || n != "" {
			t.Errorf("exit %d by itself: reason %q, note %q", code, r, n)
		}
	}
	// A process OOM-killed, and the command went on to succeed: no reason.
	if r, _ := endReason(jail.Ended{Exit: 0, OOMKills: 1}, nil, endCause{}, 64<<20, 64); r != "" {
		t.Errorf("a command that succeeded after an OOM kill: reason %q", r)
	}
	// A signal of the command's own (kill -9 $$) without a client's: none.
	if r, _ := endReason(jail.Ended{Exit: 137, Signal: 9}, nil, endCause{}, 64<<20, 64); r != "" {
		t.Errorf("a command that killed itself: reason %q", r)
	}
}
