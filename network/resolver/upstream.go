package resolver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// forward asks the upstream servers q, in order, until one answers it
// (see the package doc); an answer of SERVFAIL, REFUSED or NOTIMP, or to
// another question, counts as a failure.
func (r *Resolver) forward(ctx context.Context, q dns.Question) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Question[0].Qclass = q.Qclass
	m.RecursionDesired = true
	m.SetEdns0(ednsSize, false)

	var errs []error
	ups := r.cfg.Upstreams
	for i, up := range ups {
		left := r.cfg.Timeout
		if deadline, ok := ctx.Deadline(); ok {
			left = time.Until(deadline)
		}
		share := left / time.Duration(len(ups)-i)
		actx, cancel := context.WithTimeout(ctx, share)
		resp, err := ask(actx, up, m)
		cancel()
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// ask asks one server m over UDP, and over TCP if the answer is
// truncated, and checks the answer.
func ask(ctx context.Context, server netip.AddrPort, m *dns.Msg) (*dns.Msg, error) {
	resp, err := exchange(ctx, "udp", server, m)
	if err == nil && resp.Truncated {
		resp, err = exchange(ctx, "tcp", server, m)
	}
	if err != nil {
		return nil, err
	}
	switch resp.Rcode {
	case dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNotImplemented, dns.RcodeFormatError:
		return nil, fmt.Errorf("answered %s", dns.RcodeToString[resp.Rcode])
	}
	if !resp.Response || len(resp.Question) != 1 || !sameQuestion(resp.Question[0], m.Question[0]) {
		return nil, errors.New("answered another question")
	}
	return resp, nil
}

func sameQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}

// exchange sends m to server over network and reads its answer, until
// ctx ends.
func exchange(ctx context.Context, network string, server netip.AddrPort, m *dns.Msg) (*dns.Msg, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	// A cancel (Close) ends a read at once, not at the deadline.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	co := &dns.Conn{Conn: conn, UDPSize: dns.DefaultMsgSize}
	if err := co.WriteMsg(m); err != nil {
		return nil, fmt.Errorf("send over %s: %w", network, err)
	}
	for {
		resp, err := co.ReadMsg()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("answer over %s: %w", network, ctx.Err())
			}
			return nil, fmt.Errorf("answer over %s: %w", network, err)
		}
		if resp.Id == m.Id {
			return resp, nil
		}
		if network == "tcp" {
			return nil, fmt.Errorf("answer over tcp: %w", dns.ErrId)
		}
		// Over UDP, a stray datagram with another id is not the answer:
		// read on.
	}
}

// UpstreamsFromResolvConf reads the nameserver lines of a resolv.conf
// (the host's is /etc/resolv.conf), port 53 each, in their order. It
// keeps loopback addresses (a local stub such as systemd-resolved's
// 127.0.0.53 serves the resolver well: the resolver runs in the host's
// network namespace); the caller drops what it does not want. It fails
// when the file names no server.
func UpstreamsFromResolvConf(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("resolver: read upstream servers: %w", err)
	}
	defer f.Close()
	var ups []netip.AddrPort
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue // as glibc: a line it cannot read is skipped
		}
		ups = append(ups, netip.AddrPortFrom(a.Unmap(), 53))
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("resolver: read upstream servers from %s: %w", path, err)
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("resolver: %s names no nameserver", path)
	}
	return ups, nil
}
