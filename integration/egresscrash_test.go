package integration

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"warren/api"
	"warren/client"
	"warren/internal/netenv"
	"warren/internal/testenv"
	"warren/meta"
	"warren/network/egress"
)

// egressMarks are what names a daemon's egress network on the host: its
// links' prefix, its table, and its subnets (a restart may pick another).
type egressMarks struct {
	prefix, table string
	subnets       []netip.Prefix
}

// newEgressMarks derives a daemon's names from its data folder, as the
// daemon does (a hash of the folder's real path).
func newEgressMarks(t *testing.T, data string) *egressMarks {
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		t.Fatal(err)
	}
	id := egress.IDOf(real)
	return &egressMarks{prefix: "w" + id, table: "warren-" + id}
}

// learnSubnet adds the subnet the daemon's resolver link holds now.
func (m *egressMarks) learnSubnet(t *testing.T) {
	t.Helper()
	l, err := netlink.LinkByName(m.prefix)
	if err != nil {
		t.Fatalf("the daemon's resolver link %s: %v", m.prefix, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("the addresses of %s: %v, %v", m.prefix, addrs, err)
	}
	p, _ := netip.ParsePrefix(addrs[0].IPNet.String())
	m.subnets = append(m.subnets, p.Masked())
}

// ours says whether a line of a netenv.Snapshot is the daemon's: it names
// one of its links or its table, or an address or route in its subnets.
func (m *egressMarks) ours(line string) bool {
	f := strings.Fields(line)
	for _, w := range f {
		if w == m.prefix || strings.HasPrefix(w, m.prefix+"-") || w == m.table {
			return true
		}
	}
	if len(f) > 1 && (f[0] == "addr" || f[0] == "route") {
		if p, err := netip.ParsePrefix(f[1]); err == nil {
			for _, s := range m.subnets {
				if s.Overlaps(p) {
					return true
				}
			}
		}
	}
	return false
}

// leftOver lists what the host holds now of the daemon's that it did not
// hold in before, and logs what else changed (another test's).
func (m *egressMarks) leftOver(t *testing.T, before netenv.Snapshot) (ours, others []string) {
	for _, line := range netenv.Take(t).New(before) {
		if m.ours(line) {
			ours = append(ours, line)
		} else {
			others = append(others, line)
		}
	}
	return ours, others
}

// resolverConnect opens a TCP connection to the jail's name server (the
// daemon's resolver, on the host), so that the jail has a connection the
// host tracks, and leaves it open.
const resolverConnect = `while read -r k v; do [ "$k" = nameserver ] && exec 3<>/dev/tcp/$v/53 && break; done </etc/resolv.conf`

// TestKill9LeavesNoEgress: a daemon with 20 egress jails, killed with
// SIGKILL, restarted on its data folder, its threads closed and stopped,
// leaves no link, address, route, nftables table, chain or set of its
// own on the host: the host's network is as it was before the test.
func TestKill9LeavesNoEgress(t *testing.T) {
	testenv.RequireRootFUSE(t)
	before := netenv.Take(t)
	// The jails' resolver asks a name server on loopback that does not
	// answer: no test traffic leaves the host.
	d := newDaemon(t, "--egress-dns", "127.0.0.1:9")
	marks := newEgressMarks(t, d.data)
	defer func() {
		// Whatever happened, take away what is left of the daemon's.
		ours, _ := marks.leftOver(t, before)
		if len(ours) > 0 {
			d.stop()
			d.start()
			d.stop()
		}
	}()
	marks.learnSubnet(t)
	c := client.New(d.socket)
	defer c.CloseIdleConnections()
	ctx := context.Background()

	const jails = 20
	threads := make([]string, jails)
	var wg sync.WaitGroup
	errs := make(chan error, jails)
	for i := range jails {
		threads[i] = fmt.Sprintf("e%d", i)
		wg.Go(func() {
			if _, err := c.BindWith(ctx, "acme", threads[i], meta.Settings{Network: "egress", EgressBytesPerSecond: 1 << 20}); err != nil {
				errs <- fmt.Errorf("bind %s: %w", threads[i], err)
				return
			}
			code, err := c.Exec(ctx, "acme", threads[i], api.ExecRequest{Command: resolverConnect}, io.Discard, io.Discard)
			if err == nil && code != 0 {
				err = fmt.Errorf("exit %d", code)
			}
			if err != nil {
				errs <- fmt.Errorf("exec in %s: %w", threads[i], err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	running, _ := marks.leftOver(t, before)
	links := 0
	for _, line := range running {
		if strings.HasPrefix(line, "link "+marks.prefix+"-") {
			links++
		}
	}
	// The resolver's pair (w<id>, w<id>-0) and one link per jail.
	if links != jails+1 {
		t.Fatalf("%d links of the daemon's with %d jails running, want %d:\n%s", links, jails, jails+1, strings.Join(running, "\n"))
	}

	t.Logf("%d jails running: %d links, %d addresses, routes, chains and sets of the daemon's on the host", jails, links, len(running))
	d.kill9()
	d.start()
	marks.learnSubnet(t)
	// The restart took away what the killed run left: no jail's link is
	// left, only the new run's resolver pair.
	now, _ := marks.leftOver(t, before)
	for _, line := range now {
		if strings.HasPrefix(line, "link "+marks.prefix+"-") && line != "link "+marks.prefix+"-0" {
			t.Errorf("after the restart: %s", line)
		}
	}
	for _, th := range threads {
		if _, err := c.CloseThread(ctx, "acme", th); err != nil {
			t.Errorf("close %s: %v", th, err)
		}
	}
	d.stop()

	// Links of namespaces that ended go in the kernel's own time.
	var ours, others []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ours, others = marks.leftOver(t, before); len(ours) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(ours) > 0 {
		t.Errorf("the daemon left on the host:\n%s", strings.Join(ours, "\n"))
	}
	if len(others) > 0 {
		t.Logf("changed meanwhile, not of this daemon's (other tests'):\n%s", strings.Join(others, "\n"))
	}
}
