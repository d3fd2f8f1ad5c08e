package egress_test

import (
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"warren/internal/netenv"
	"warren/network/egress"
)

// rateWindow is how long each measure of a jail's rate lasts.
const rateWindow = 5 * time.Second

// receiveRate reads c for rateWindow from its first byte and returns the
// bytes per second it received.
func receiveRate(c net.Conn) (float64, error) {
	buf := make([]byte, 64<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := c.Read(buf)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(rateWindow))
	var got int64
	for {
		k, err = c.Read(buf)
		got += int64(k)
		if err != nil {
			break
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, err
	}
	return float64(got) / time.Since(start).Seconds(), nil
}

// send writes to c until it fails (the other end closed).
func send(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// measure runs one stream between the jail (ns) and the world's listener
// l, the jail receiving (down) or sending, and returns the receiver's
// rate.
func measure(t *testing.T, ns *netenv.NS, l net.Listener, down bool) float64 {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	jc, err := dialTimeout(ns, l.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial the world: %v", err)
	}
	defer jc.Close()
	wc, ok := <-accepted
	if !ok {
		t.Fatal("the world accepted nothing")
	}
	defer wc.Close()
	from, to := jc, wc
	if down {
		from, to = wc, jc
	}
	go send(from)
	r, err := receiveRate(to)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return r
}

// medianRate measures three times and returns the median.
func medianRate(t *testing.T, ns *netenv.NS, l net.Listener, down bool) (float64, []float64) {
	t.Helper()
	var rs []float64
	for range 3 {
		rs = append(rs, measure(t, ns, l, down))
	}
	slices.Sort(rs)
	return rs[1], rs
}

// TestRateLimit: a jail bound to a low rate moves, over 5 s, within a
// quarter of that rate each way (the median of three runs), and a new
// rate applies to the running jail.
func TestRateLimit(t *testing.T) {
	w := netenv.NewWorld(t)
	l := w.Listen(t, "tcp", w.Addr.String()+":0")
	n := openNetwork(t, egress.Config{})
	const rate = 256 << 10
	ns, link := attach(t, n, egress.Policy{BytesPerSecond: rate})
	within := func(what string, want float64, down bool) {
		t.Helper()
		got, all := medianRate(t, ns, l, down)
		t.Logf("%s: median %.0f KiB/s of %.0f KiB/s (runs %.0f, %.0f, %.0f KiB/s)", what, got/1024, want/1024, all[0]/1024, all[1]/1024, all[2]/1024)
		if got < 0.75*want || got > 1.25*want {
			t.Errorf("%s: %.0f bytes/s, want %.0f ± 25 %%", what, got, want)
		}
	}
	within("download", rate, true)
	within("upload", rate, false)

	// A new rate on the running jail, then none.
	if err := link.SetRate(ns.Fd(), 2*rate); err != nil {
		t.Fatal(err)
	}
	for _, down := range []bool{true, false} {
		got := measure(t, ns, l, down)
		t.Logf("at %d KiB/s, down %v: %.0f KiB/s", 2*rate>>10, down, got/1024)
		if got < 0.75*2*rate || got > 1.25*2*rate {
			t.Errorf("after SetRate(%d), down %v: %.0f bytes/s", 2*rate, down, got)
		}
	}
	if err := link.SetRate(ns.Fd(), 0); err != nil {
		t.Fatal(err)
	}
	if got := measure(t, ns, l, true); got < 8*rate {
		t.Errorf("without a bound: %.0f bytes/s, want far over %d", got, rate)
	}
}
