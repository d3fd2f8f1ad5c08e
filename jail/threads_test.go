package jail

import (
	"testing"

	"warren/internal/testenv"
)

// TestLiveJailsHoldNoOSThread: a live, idle jail costs the daemon no OS
// thread. Its reader waits for the init's next reply in the runtime's
// poller; with a blocking recvmsg, each of the 40 jails below held one
// (the daemon had about one OS thread per live jail: a thousand at a
// thousand jails, where the 10,000-thread target allows 200 in all).
func TestLiveJailsHoldNoOSThread(t *testing.T) {
	const jails = 40
	j0, _ := startJail(t)
	run(t, j0, "true") // the first start's one-time costs, before the count
	before := testenv.OSThreads(t)
	for range jails {
		j, _ := startJail(t)
		if code, out, _ := run(t, j, "echo up"); code != 0 || out != "up\n" {
			t.Fatalf("a command in a new jail: exit %d, %q", code, out)
		}
	}
	grew := testenv.OSThreads(t) - before
	t.Logf("%d live jails: %d more OS threads", jails, grew)
	if grew > jails/4 {
		t.Errorf("%d live, idle jails cost %d more OS threads, want a few at most (none of their own)", jails, grew)
	}
}
