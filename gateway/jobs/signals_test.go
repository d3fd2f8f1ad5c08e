package jobs

import (
	"errors"
	"syscall"
	"testing"

	"warren/api"
)

// TestParseSignal: the names of kill -l, with or without SIG, in any
// case, and the numbers 1 to 64; nothing else, and not 0.
func TestParseSignal(t *testing.T) {
	for _, c := range []struct {
		in   string
		sig  syscall.Signal
		name string
	}{
		{"SIGINT", syscall.SIGINT, "SIGINT"},
		{"int", syscall.SIGINT, "SIGINT"},
		{"Sigterm", syscall.SIGTERM, "SIGTERM"},
		{"KILL", syscall.SIGKILL, "SIGKILL"},
		{"usr1", syscall.SIGUSR1, "SIGUSR1"},
		{"sigwinch", syscall.SIGWINCH, "SIGWINCH"},
		{"9", syscall.SIGKILL, "SIGKILL"},
		{"1", syscall.SIGHUP, "SIGHUP"},
		{"31", syscall.SIGSYS, "SIGSYS"},
		{"32", 32, "SIG32"},
		{"34", 34, "SIGRTMIN"},
		{"RTMIN", 34, "SIGRTMIN"},
		{"sigrtmin+1", 35, "SIGRTMIN+1"},
		{"RTMIN+15", 49, "SIGRTMIN+15"},
		{"rtmin+16", 50, "SIGRTMAX-14"},
		{"SIGRTMAX-1", 63, "SIGRTMAX-1"},
		{"rtmax", 64, "SIGRTMAX"},
		{"64", 64, "SIGRTMAX"},
	} {
		sig, name, err := parseSignal(c.in)
		if err != nil || sig != c.sig || name != c.name {
			t.Errorf("parseSignal(%q) = %d, %q, %v; want %d, %q", c.in, sig, name, err, c.sig, c.name)
		}
	}
	for _, bad := range []string{"", "0", "-1", "65", "1000", "SIG", "FOO", "SIGFOO", "RTMIN+31", "RTMAX-31", "RTMIN-1",
		"RTMAX+1", "RTMIN+", "RTMIN++1", "RTMIN+-1", "RT", " INT", "INT ", "2.0", "0x2", "+2", "SIGSIGINT", "IOT"} {
		if sig, name, err := parseSignal(bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("parseSignal(%q) = %d, %q, %v; want invalid", bad, sig, name, err)
		}
	}
}
