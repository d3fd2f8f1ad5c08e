package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestLinksOnlyTheClient keeps the client side light: the wire types, the
// Go client and this CLI link none of the daemon (gateway, fs, jail, the
// store engines, FUSE, gRPC, a logger). Go runs the init of every package
// a binary links, so each of them would slow every CLI call.
func TestLinksOnlyTheClient(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	wire := []string{"warren/api", "warren/meta"}
	for _, c := range []struct {
		pkg     string
		allowed []string // besides the standard library and pkg itself
	}{
		{"warren/api", wire},
		{"warren/client", wire},
		// The terminal code of exec -t needs x/sys/unix; internal/version
		// is the standard library and api; the doctor's disk image row
		// needs internal/diskimage's decision, which with
		// internal/diskquota is the standard library and x/sys/unix. The
		// progress bar of the long calls on a terminal is mpb, with what
		// it draws with (progressbar would link net/http). The doctor's
		// egress firewall row reads nftables through google/nftables,
		// over mdlayher's netlink.
		{"warren/cmd/warren", append([]string{"warren/client", "warren/internal/cli", "warren/internal/doctor", "warren/internal/diskimage", "warren/internal/diskquota", "warren/internal/mountinfo", "warren/internal/version", "golang.org/x/sys/unix",
			"github.com/vbauerster/mpb/v8", "github.com/vbauerster/mpb/v8/decor", "github.com/vbauerster/mpb/v8/internal", "github.com/vbauerster/cupwriter",
			"github.com/VividCortex/ewma", "github.com/acarl005/stripansi", "github.com/mattn/go-runewidth", "github.com/clipperhouse/uax29/v2/graphemes",
			"github.com/google/nftables", "github.com/google/nftables/binaryutil", "github.com/google/nftables/internal/parseexprfunc", "github.com/google/nftables/alignedbuff",
			"github.com/google/nftables/xt", "github.com/google/nftables/expr", "github.com/google/nftables/userdata",
			"github.com/mdlayher/netlink", "github.com/mdlayher/netlink/nlenc", "github.com/mdlayher/netlink/nltest", "github.com/mdlayher/socket",
			"golang.org/x/net/bpf", "golang.org/x/sync/errgroup"}, wire...)},
	} {
		out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps",
			"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", c.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", c.pkg, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if p != c.pkg && !slices.Contains(c.allowed, p) {
				t.Errorf("%s depends on %s; it may import only the standard library and %v", c.pkg, p, c.allowed)
			}
		}
	}
	// Nor net/http, which links TLS, x509 and HTTP/2 with it: the client
	// has a transport of its own (client/transport.go).
	for _, pkg := range []string{"warren/client", "warren/cmd/warren"} {
		out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if p == "net/http" || p == "crypto/tls" {
				t.Errorf("%s depends on %s", pkg, p)
			}
		}
	}
}
