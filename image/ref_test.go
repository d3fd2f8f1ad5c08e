package image

import (
	"context"
	"encoding/base64"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct{ in, want, registry, digest string }{
		{"node:22", "docker.io/library/node:22", "docker.io", ""},
		{"node", "docker.io/library/node:latest", "docker.io", ""},
		{"docker.io/node", "docker.io/library/node:latest", "docker.io", ""},
		{"index.docker.io/library/node:22", "docker.io/library/node:22", "docker.io", ""},
		{"team/app:1", "docker.io/team/app:1", "docker.io", ""},
		{"registry.example:5000/team/py:3.12", "registry.example:5000/team/py:3.12", "registry.example:5000", ""},
		{"127.0.0.1:5000/app", "127.0.0.1:5000/app:latest", "127.0.0.1:5000", ""},
		{"localhost/app:1", "localhost/app:1", "localhost", ""},
		{"node@" + d, "docker.io/library/node@" + d, "docker.io", d},
		{"node:22@" + d, "docker.io/library/node@" + d, "docker.io", d},
		{"ghcr.io/a/b/c:v1.2", "ghcr.io/a/b/c:v1.2", "ghcr.io", ""},
	} {
		r, err := ParseRef(c.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", c.in, err)
			continue
		}
		if r.String() != c.want || r.Registry() != c.registry || r.Digest() != c.digest {
			t.Errorf("ParseRef(%q) = %s (registry %s, digest %q), want %s (%s, %q)", c.in, r, r.Registry(), r.Digest(), c.want, c.registry, c.digest)
		}
		// Normal forms are fixed points.
		if again, err := ParseRef(r.String()); err != nil || again != r {
			t.Errorf("ParseRef(%q) = %v, %v, want itself", r, again, err)
		}
	}
	for _, bad := range []string{"", "Node:22", "node:", "node@sha256:abc", "http://reg/x:1", " node", "a b", "node:tag:tag", "node@sha512:" + strings.Repeat("ab", 64)} {
		if r, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) = %s, want an error", bad, r)
		}
	}
}

func TestRefusedAddresses(t *testing.T) {
	for _, c := range []struct {
		addr, kind string
	}{
		{"127.0.0.1", "loopback"}, {"127.5.5.5", "loopback"}, {"::1", "loopback"},
		{"0.0.0.0", "this-network (0/8)"}, {"::", "unspecified"},
		{"169.254.169.254", "link-local (and metadata)"}, {"fe80::1", "link-local"}, {"fe80::1%eth0", "link-local"},
		{"10.1.2.3", "private"}, {"172.16.0.1", "private"}, {"172.31.255.255", "private"}, {"192.168.1.1", "private"},
		{"100.64.0.1", "shared (carrier NAT)"}, {"fd00::1", "private"},
		{"224.0.0.1", "multicast"}, {"ff02::1", "multicast"}, {"255.255.255.255", "reserved"},
		{"::ffff:10.0.0.1", "private"}, {"64:ff9b::a9fe:a9fe", "link-local (and metadata)"},
		{"8.8.8.8", ""}, {"172.32.0.1", ""}, {"2606:4700::1111", ""}, {"100.128.0.1", ""},
	} {
		if got := refusedKind(netip.MustParseAddr(c.addr)); got != c.kind {
			t.Errorf("refusedKind(%s) = %q, want %q", c.addr, got, c.kind)
		}
	}
}

func TestGuard(t *testing.T) {
	g := newGuard([]string{"127.0.0.1:5000", "mirror.internal:8443", "docker.io", "localhost:6000"})
	g.resolve = func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "mirror.internal" {
			return []netip.Addr{netip.MustParseAddr("10.9.9.9")}, nil
		}
		return nil, nil
	}
	ctx := context.Background()
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:5000", true}, {"127.0.0.1:5001", false}, {"127.0.0.2:5000", false},
		{"10.9.9.9:8443", true}, {"10.9.9.9:443", false}, {"10.9.9.8:8443", false},
		{"169.254.169.254:80", false}, {"93.184.216.34:443", true},
	} {
		err := g.control(ctx)("tcp", c.addr, nil)
		if (err == nil) != c.ok {
			t.Errorf("control(%s) = %v, want allowed %v", c.addr, err, c.ok)
		}
	}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:5000", true}, {"localhost:6000", true}, {"mirror.internal:8443", false},
		{"docker.io", false}, {"127.0.0.1:5001", false},
	} {
		if got := g.insecureOK(c.host); got != c.ok {
			t.Errorf("insecureOK(%s) = %v, want %v", c.host, got, c.ok)
		}
	}
	if !g.allowed("docker.io") || g.allowed("ghcr.io") || !newGuard(nil).allowed("ghcr.io") {
		t.Error("allowed: docker.io named, ghcr.io not; nil allows any")
	}
}

func TestAuthFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	basic := base64.StdEncoding.EncodeToString([]byte("me:secret"))
	must(t, os.WriteFile(path, []byte(`{"auths": {
		"https://index.docker.io/v1/": {"auth": "`+basic+`"},
		"ghcr.io": {"username": "u", "password": "p"},
		"registry.example:5000": {"identitytoken": "tok"}
	}}`), 0o600))
	k, err := readAuthFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ reg, user, pass, token string }{
		{"index.docker.io", "me", "secret", ""},
		{"ghcr.io", "u", "p", ""},
		{"registry.example:5000", "", "", "tok"},
		{"quay.io", "", "", ""},
	} {
		r, _ := name.NewRegistry(c.reg)
		a, err := k.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Username != c.user || cfg.Password != c.pass || cfg.IdentityToken != c.token {
			t.Errorf("credentials for %s = %+v", c.reg, cfg)
		}
	}
	if _, err := readAuthFile(filepath.Join(t.TempDir(), "missing.json")); err != nil {
		t.Errorf("a missing file: %v, want anonymous", err)
	}
	must(t, os.WriteFile(path, []byte("{"), 0o600))
	if _, err := readAuthFile(path); err == nil {
		t.Error("a broken file read without error")
	}
}
