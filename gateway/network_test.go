package gateway

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"warren/api"
	"warren/internal/netenv"
	"warren/meta"
)

// upstreamDNS is a name server of the test's own on loopback: the egress
// resolver asks it, as it would ask the host's.
func upstreamDNS(t *testing.T, records map[string]netip.Addr) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		a, ok := records[strings.TrimSuffix(q.Name, ".")]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
		}
		w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

// run runs a command in a thread's jail and returns its exit code and
// output.
func (e *testEnv) run(t *testing.T, thread, command string) (int, string) {
	t.Helper()
	var out strings.Builder
	code, err := e.c.Exec(context.Background(), "acme", thread, api.ExecRequest{Command: command}, &out, &out)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return code, out.String()
}

// TestEgressNetwork: a jail in network egress reaches the test's outside
// world by name and by address, through the daemon's resolver and NAT;
// the metadata address and the host's own listeners are refused at once;
// a new policy applies to the running jail; a jail without network fails
// its lookups at once.
func TestEgressNetwork(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	port := strconv.Itoa(out.Addr().(*net.TCPAddr).Port)
	meta169 := netip.MustParseAddr("169.254.169.254")
	w.Route(t, meta169)
	metaL := w.Listen(t, "tcp", meta169.String()+":80")
	netenv.Serve(metaL, "metadata")
	up := upstreamDNS(t, map[string]netip.Addr{"world.test": w.Addr, "metadata.test": meta169})

	e := startEnv(t, Config{EgressDNS: []netip.AddrPort{up}})
	ctx := context.Background()
	if _, err := e.c.BindWith(ctx, "acme", "net", meta.Settings{Network: "egress"}); err != nil {
		t.Fatal(err)
	}
	greet := `exec 3<>/dev/tcp/%s/%s && head -1 <&3`
	dial := func(host, port string) string {
		return strings.Replace(strings.Replace(greet, "%s", host, 1), "%s", port, 1)
	}
	if code, got := e.run(t, "net", dial("world.test", port)); code != 0 || got != "world\n" {
		t.Fatalf("the world by name from an egress jail: exit %d, %q", code, got)
	}
	if code, got := e.run(t, "net", dial(w.Addr.String(), port)); code != 0 || got != "world\n" {
		t.Errorf("the world by address: exit %d, %q", code, got)
	}
	start := time.Now()
	if code, got := e.run(t, "net", dial("metadata.test", "80")); code == 0 || strings.HasPrefix(got, "metadata\n") {
		t.Errorf("the metadata address reached: exit %d, %q", code, got)
	}
	hostL, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	netenv.Serve(hostL, "host")
	hostPort := strconv.Itoa(hostL.Addr().(*net.TCPAddr).Port)
	for _, a := range []string{"127.0.0.1", "203.0.113.254"} {
		if code, got := e.run(t, "net", dial(a, hostPort)); code == 0 || strings.HasPrefix(got, "host\n") {
			t.Errorf("a host listener through %s: exit %d, %q", a, code, got)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("refusals took %v: want them at once", took)
	}

	// A job keeps running across a change of rules; the next lookup
	// follows the new rules: a denied name does not resolve.
	jobOut, err := e.c.Spawn(ctx, "acme", "net", api.SpawnRequest{Command: "sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.SetNetwork(ctx, "acme", "net", meta.Egress{Deny: []string{"world.test"}}); err != nil {
		t.Fatalf("set network: %v", err)
	}
	if code, got := e.run(t, "net", "getent hosts world.test"); code == 0 {
		t.Errorf("a denied name resolved: %q", got)
	}
	if code, got := e.run(t, "net", dial(w.Addr.String(), port)); code != 0 || got != "world\n" {
		t.Errorf("the world by address, its name denied: exit %d, %q", code, got)
	}
	// Default deny: only allowed names' answers.
	if _, err := e.c.SetNetwork(ctx, "acme", "net", meta.Egress{Default: "deny", Allow: []string{"world.test"}}); err != nil {
		t.Fatal(err)
	}
	if code, got := e.run(t, "net", dial("world.test", port)); code != 0 || got != "world\n" {
		t.Errorf("an allowed name under default deny: exit %d, %q", code, got)
	}
	jobs, err := e.c.Jobs(ctx, "acme", "net")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == jobOut.ID && !j.Running {
			t.Errorf("the job did not outlive the change: %+v", j)
		}
	}
	// A thread not in egress has no rules to change.
	if _, err := e.c.SetNetwork(ctx, "acme", "plain", meta.Egress{}); err == nil {
		t.Errorf("egress rules for a thread without egress: accepted")
	}
	// Without network, a lookup fails at once.
	start = time.Now()
	if code, _ := e.run(t, "plain", "getent hosts world.test"); code == 0 {
		t.Errorf("a lookup without network succeeded")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a lookup without network took %v", took)
	}
}

// TestEgressRefusalTold: a connection the kernel's rules refuse is a
// network.refused event of the thread, naming the destination and the
// rule, and a refusal in the metrics.
func TestEgressRefusalTold(t *testing.T) {
	w := netenv.NewWorld(t)
	meta169 := netip.MustParseAddr("169.254.169.254")
	w.Route(t, meta169)
	netenv.Serve(w.Listen(t, "tcp", meta169.String()+":80"), "metadata")
	up := upstreamDNS(t, nil)

	e := startEnv(t, Config{EgressDNS: []netip.AddrPort{up}})
	ctx := context.Background()
	if _, err := e.c.BindWith(ctx, "acme", "net", meta.Settings{Network: "egress"}); err != nil {
		t.Fatal(err)
	}
	s := follow(t, e.c, "acme", "net")
	waitSubscribers(t, e.g, 1)
	if code, got := e.run(t, "net", "exec 3<>/dev/tcp/169.254.169.254/80 && head -1 <&3"); code == 0 {
		t.Fatalf("the metadata address reached: %q", got)
	}
	for {
		ev := s.next(t)
		if ev.Type != api.EventNetworkRefused {
			continue
		}
		if !strings.Contains(ev.Message, "tcp 169.254.169.254:80") || !strings.Contains(ev.Message, "never reachable") {
			t.Errorf("network.refused says %q, want the destination and the rule", ev.Message)
		}
		break
	}
	text, err := e.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `warren_refusals_total{kind="network"} 1`) {
		t.Errorf("no network refusal counted:\n%s", grepLines(text, "warren_refusals_total"))
	}
}

// grepLines are the lines of text that hold s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNoNetworkNote: a command that failed in a jail without network
// after it looked a name up says why, in its end and in a job's; one that
// looked nothing up does not.
func TestNoNetworkNote(t *testing.T) {
	e := startEnv(t, Config{})
	ctx := context.Background()
	if _, err := e.c.BindWith(ctx, "acme", "plain", meta.Settings{Network: "none"}); err != nil {
		t.Fatal(err)
	}
	exec := func(command string) api.ExecFrame {
		t.Helper()
		var out strings.Builder
		end, err := e.c.ExecEnd(ctx, "acme", "plain", api.ExecRequest{Command: command}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		return end
	}
	end := exec("getent hosts example.com")
	if *end.Exit == 0 || end.Reason != api.ReasonNoNetwork || !strings.Contains(end.Note, "no network (network: none)") ||
		!strings.Contains(end.Note, `"example.com"`) || !strings.Contains(end.Note, "--network egress") {
		t.Errorf("a failed lookup without network ends with exit %d, reason %q, note %q", *end.Exit, end.Reason, end.Note)
	}
	if end := exec("exit 3"); end.Reason != "" || end.Note != "" {
		t.Errorf("a failure without a lookup: reason %q, note %q", end.Reason, end.Note)
	}
	if end := exec("getent hosts localhost"); *end.Exit != 0 || end.Note != "" {
		t.Errorf("a lookup from /etc/hosts: exit %d, note %q", *end.Exit, end.Note)
	}

	// A job's end says it too.
	evs := follow(t, e.c, "acme", "plain")
	waitSubscribers(t, e.g, 1)
	if _, err := e.c.Spawn(ctx, "acme", "plain", api.SpawnRequest{Command: "getent hosts example.org"}); err != nil {
		t.Fatal(err)
	}
	for {
		ev := evs.next(t)
		if ev.Type != api.EventJobEnded {
			continue
		}
		if ev.Reason != api.ReasonNoNetwork || !strings.Contains(ev.Message, `"example.org"`) {
			t.Errorf("a job's failed lookup without network: reason %q, note %q", ev.Reason, ev.Message)
		}
		break
	}
}

// TestEgressCutAtOnce: a job blocked in a read on a connection that a new
// policy refuses ends at once, not at the connection's next packet.
func TestEgressCutAtOnce(t *testing.T) {
	w := netenv.NewWorld(t)
	out := w.Listen(t, "tcp", w.Addr.String()+":0")
	netenv.Serve(out, "world")
	port := strconv.Itoa(out.Addr().(*net.TCPAddr).Port)
	e := startEnv(t, Config{EgressDNS: []netip.AddrPort{upstreamDNS(t, nil)}})
	ctx := context.Background()
	if _, err := e.c.BindWith(ctx, "acme", "net", meta.Settings{Network: "egress"}); err != nil {
		t.Fatal(err)
	}
	evs := follow(t, e.c, "acme", "net")
	waitSubscribers(t, e.g, 1)
	if _, err := e.c.Spawn(ctx, "acme", "net", api.SpawnRequest{
		Command: "exec 3<>/dev/tcp/" + w.Addr.String() + "/" + port + " && head -1 <&3 && cat <&3"}); err != nil {
		t.Fatal(err)
	}
	waitEventOf(t, evs.events, api.EventJobOutput, "net") // the greeting: it reads now
	if _, err := e.c.SetNetwork(ctx, "acme", "net", meta.Egress{Deny: []string{w.Addr.String() + "/32"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ev := waitEventOf(t, evs.events, api.EventJobEnded, "net")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a job blocked in a read on a refused connection ended after %v", took)
	}
	if ev.Exit == nil || *ev.Exit == 0 {
		t.Errorf("a job whose connection was cut: %+v", ev)
	}
}

// uploadRate accepts one connection on l and returns the rate it received
// at, from its first byte to its end.
func uploadRate(l net.Listener) (float64, int64, error) {
	c, err := l.Accept()
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 64<<10)
	k, err := c.Read(buf)
	if err != nil {
		return 0, 0, err
	}
	start, got := time.Now(), int64(k)
	for {
		k, err := c.Read(buf)
		got += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, got, err
		}
	}
	return float64(got) / time.Since(start).Seconds(), got, nil
}

// TestEgressRateRebind: a bind with a new egressBytesPerSecond changes
// the rate of the thread's running jail (a job runs across it), and the
// jail's uploads follow each rate.
func TestEgressRateRebind(t *testing.T) {
	w := netenv.NewWorld(t)
	l := w.Listen(t, "tcp", w.Addr.String()+":0")
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	e := startEnv(t, Config{EgressDNS: []netip.AddrPort{upstreamDNS(t, nil)}})
	ctx := context.Background()
	job := ""
	for i, rate := range []int64{128 << 10, 512 << 10} {
		if _, err := e.c.BindWith(ctx, "acme", "rate", meta.Settings{Network: "egress", EgressBytesPerSecond: rate}); err != nil {
			t.Fatalf("bind at %d bytes/s: %v", rate, err)
		}
		if i == 0 {
			j, err := e.c.Spawn(ctx, "acme", "rate", api.SpawnRequest{Command: "sleep 120"})
			if err != nil {
				t.Fatal(err)
			}
			job = j.ID
		}
		// Four seconds' worth.
		type result struct {
			rate float64
			n    int64
			err  error
		}
		done := make(chan result, 1)
		go func() { r, n, err := uploadRate(l); done <- result{r, n, err} }()
		if code, out := e.run(t, "rate", "head -c "+strconv.FormatInt(4*rate, 10)+" /dev/zero >/dev/tcp/"+w.Addr.String()+"/"+port); code != 0 {
			t.Fatalf("upload: exit %d: %s", code, out)
		}
		r := <-done
		if r.err != nil || r.n != 4*rate {
			t.Fatalf("upload at %d bytes/s: %d bytes, %v", rate, r.n, r.err)
		}
		t.Logf("bound %d KiB/s: uploaded at %.0f KiB/s", rate>>10, r.rate/1024)
		if r.rate < 0.75*float64(rate) || r.rate > 1.25*float64(rate) {
			t.Errorf("bound %d bytes/s: uploaded at %.0f bytes/s, want within 25 %%", rate, r.rate)
		}
	}
	jobs, err := e.c.Jobs(ctx, "acme", "rate")
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == job && !j.Running {
			t.Errorf("the jail restarted for a new rate: job %s ended", job)
		}
	}
}
