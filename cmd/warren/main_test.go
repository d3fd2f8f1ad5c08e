package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/fs"
	"warren/gateway"
	"warren/internal/cli"
	"warren/internal/testenv"
	"warren/meta/badger"
)

// startGateway serves a gateway, with its real FUSE mounts, on a socket in
// a temporary folder. When the test ends it closes the gateway and checks
// that nothing it mounted is left: nothing below its data folder, nothing
// at an inspection mount it still has a record of.
func startGateway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	store, err := badger.Open(context.Background(), filepath.Join(dir, "meta"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// Registered before Close, so it runs after it (and before the store
	// closes).
	t.Cleanup(func() {
		roots := []string{data}
		ms, err := store.ListInspectionMounts(context.Background())
		if err != nil {
			t.Errorf("list inspection mounts: %v", err)
		}
		for _, m := range ms {
			roots = append(roots, m.Path)
		}
		for _, p := range testenv.MountsUnder(t, roots...) {
			t.Errorf("mount left at %s after the test", p)
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				t.Errorf("detach %s: %v", p, err)
			}
		}
		testenv.UnsealMountPoints(t, data)
	})
	g, err := gateway.Start(context.Background(), gateway.Config{
		DataDir: data,
		Store:   store,
		Logger:  hclog.New(&hclog.LoggerOptions{Output: t.Output(), Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close gateway: %v", err)
		}
	})
	return g.SocketPath()
}

// runCLI runs a command line against socket and returns the exit status
// and the outputs.
func runCLI(t *testing.T, socket string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "WARREN_SOCKET" {
			return socket
		}
		return ""
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, e, args)
	return code, out.String(), errOut.String()
}

func TestClientVerbs(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	dir, rwDir := t.TempDir(), t.TempDir()
	// mounted returns a check that the mount table lists (or does not
	// list) a mount at *p.
	var bindPath string
	mounted := func(p *string, want bool) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			got, err := fs.IsMountpoint(*p)
			if err != nil || got != want {
				t.Errorf("%s: got mounted %v (%v), want %v", *p, got, err, want)
			}
		}
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string // substring of stdout
		wantErrOut string // substring of stderr
		after      func(t *testing.T)
	}{
		{"bind", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", "", mounted(&bindPath, true)},
		{"bind again", []string{"bind", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "/mnt/acme/%2e.%2fother-tenant%2ft-1\n", "", nil},
		{"bind json", []string{"bind", "--thread", "t-2", "--json"}, 0, `"thread": "t-2"`, "", nil},
		{"bind escape sequence", []string{"bind", "--thread", "a\x1b[31m"}, 0, "/mnt/default/a%1b%5b31m", "", nil},
		{"ls", []string{"ls"}, 0, "acme     ../other-tenant/t-1  bound", "", nil},
		{"ls quotes odd ids", []string{"ls", "--tenant", ""}, 0, `"a\x1b[31m"`, "", nil},
		{"ls one tenant", []string{"ls", "--tenant", "acme", "--json"}, 0, `"tenant": "acme"`, "", nil},
		{"mount", []string{"mount", "--thread", "t-2", dir}, 0, dir + " (read-only)", "", mounted(&dir, true)},
		{"mount flags after DIR", []string{"mount", rwDir, "--thread", "t-2", "--rw"}, 0, "(read-write)", "", mounted(&rwDir, true)},
		{"umount", []string{"umount", dir}, 0, "", "", mounted(&dir, false)},
		{"umount again", []string{"umount", dir}, 1, "", "no inspection mount", nil},
		{"close", []string{"close", "--thread", "t-2"}, 0, "closed default/t-2", "", nil},
		{"close unknown", []string{"close", "--thread", "nobody"}, 1, "", "not bound", nil},
		{"delete", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 0, "deleted acme/../other-tenant/t-1", "", mounted(&bindPath, false)},
		{"delete again", []string{"delete", "--tenant", "acme", "--thread", "../other-tenant/t-1"}, 1, "", "not bound", nil},
		{"no thread", []string{"bind"}, 2, "", "--thread is required", nil},
		{"unknown flag", []string{"ls", "--bogus"}, 2, "", "flag provided but not defined", nil},
		{"stray argument", []string{"close", "--thread", "t", "extra"}, 2, "", "unexpected arguments", nil},
		{"mount without DIR", []string{"mount", "--thread", "t"}, 2, "", "exactly one DIR", nil},
		{"unknown verb", []string{"frobnicate"}, 2, "", "unknown command", nil},
		{"no verb", nil, 2, "", "usage: warren", nil},
		{"help", []string{"bind", "-h"}, 0, "", "usage: warren bind", nil},
		{"no gateway", []string{"ls", "--socket", filepath.Join(t.TempDir(), "none.sock")}, 1, "", "is 'warren serve' running?", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, sock, tt.args...)
			if tt.name == "bind" {
				bindPath = strings.TrimSuffix(out, "\n")
			}
			if code != tt.wantCode {
				t.Errorf("got exit %d, want %d (stdout %q, stderr %q)", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("got stdout %q, want it to contain %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErrOut) {
				t.Errorf("got stderr %q, want it to contain %q", errOut, tt.wantErrOut)
			}
			if tt.after != nil {
				tt.after(t)
			}
		})
	}
}

func TestLsJSONEmpty(t *testing.T) {
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "ls", "--json")
	if code != 0 {
		t.Fatalf("got exit %d (%s)", code, errOut)
	}
	var got []api.ThreadInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil || got == nil || len(got) != 0 {
		t.Errorf("got %q (%v), want an empty JSON list", out, err)
	}
}

// TestLsPages: warren ls prints every thread by default, following the
// daemon's pages; --limit prints one page and, on stderr, the cursor of
// the next, which --cursor continues from, to a last page with none.
func TestLsPages(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("t-%d", i)
		if code, _, errOut := runCLI(t, sock, "bind", "--tenant", "acme", "--thread", id); code != 0 {
			t.Fatalf("bind %s: exit %d (%s)", id, code, errOut)
		}
		want = append(want, id)
	}
	threadsOf := func(t *testing.T, out string) []string {
		t.Helper()
		var tis []api.ThreadInfo
		if err := json.Unmarshal([]byte(out), &tis); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		var ids []string
		for _, ti := range tis {
			ids = append(ids, ti.Thread)
		}
		return ids
	}
	code, out, errOut := runCLI(t, sock, "ls", "--json")
	if code != 0 || strings.Join(threadsOf(t, out), ",") != strings.Join(want, ",") || errOut != "" {
		t.Errorf("ls --json: exit %d, stdout %q, stderr %q; want every thread and no cursor", code, out, errOut)
	}

	cursorRE := regexp.MustCompile(`--cursor (\S+)\n$`)
	var got []string
	args := []string{"ls", "--json", "--tenant", "acme", "--limit", "2"}
	for pages := 1; ; pages++ {
		code, out, errOut := runCLI(t, sock, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d (%s)", args, code, errOut)
		}
		page := threadsOf(t, out)
		got = append(got, page...)
		m := cursorRE.FindStringSubmatch(errOut)
		if pages == 3 {
			if m != nil || len(page) != 1 {
				t.Errorf("last page: got %q and stderr %q, want one thread and no cursor", page, errOut)
			}
			break
		}
		if m == nil || len(page) != 2 {
			t.Fatalf("page %d: got %q and stderr %q, want two threads and a cursor", pages, page, errOut)
		}
		args = []string{"ls", "--json", "--tenant", "acme", "--limit", "2", "--cursor", m[1]}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("pages: got %q, want %q", got, want)
	}

	for _, bad := range [][]string{{"ls", "--limit", "0"}, {"ls", "--limit", "1001"}, {"ls", "--cursor", ""}} {
		if code, _, errOut := runCLI(t, sock, bad...); code != 2 || errOut == "" {
			t.Errorf("%q: got exit %d (%q), want 2 and a usage error", bad, code, errOut)
		}
	}
	if code, _, errOut := runCLI(t, sock, "ls", "--cursor", "garbage"); code != 1 || !strings.Contains(errOut, "malformed cursor") {
		t.Errorf("ls --cursor garbage: got exit %d (%q), want 1 and the daemon's refusal", code, errOut)
	}
}

// TestGlobalFlagsBeforeCommand: --socket and --tenant may come before the
// command, as docker's and kubectl's flags do; any other flag there, or
// one without its value, is a usage error that says so; so are a missing
// and an empty --thread, each in its own words.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	nowhere := filepath.Join(t.TempDir(), "no.sock")
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string // substring of stdout, or of stderr when wantCode != 0
	}{
		{[]string{"--socket", sock, "--tenant", "acme", "bind", "--thread", "g1"}, 0, "/mnt/acme/g1\n"},
		{[]string{"--socket=" + sock, "ls", "--tenant", "acme"}, 0, "acme"},
		{[]string{"-socket", sock, "--tenant=acme", "ls", "--json"}, 0, `"thread": "g1"`},
		// The flag after the command wins, as the flag package has it.
		{[]string{"--tenant", "other", "--socket", sock, "ls", "--tenant", "acme"}, 0, "g1"},
		{[]string{"--json", "--socket", sock, "ls"}, 2, "--json is not a flag that may come before the command"},
		{[]string{"--socket"}, 2, "--socket needs a value"},
		{[]string{"--socket", sock}, 2, "no command after --socket " + sock},
		{[]string{"--tenant", "acme", "hosts"}, 2, "flag provided but not defined: -tenant"},
		{[]string{"--socket", sock, "bind", "--thread", ""}, 2, "--thread is empty: a thread id has at least one character"},
		{[]string{"--socket", sock, "bind"}, 2, "--thread is required"},
	} {
		code, out, errOut := runCLI(t, nowhere, tc.args...)
		got := out
		if tc.wantCode != 0 {
			got = errOut
		}
		if code != tc.wantCode || !strings.Contains(got, tc.want) {
			t.Errorf("warren %q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.wantCode, tc.want)
		}
	}
}

// TestVersionVerb: warren version says the client's version and Go
// version and exits 0 whether a daemon answers or not; with one, it says
// the daemon's too, with its kernel's features.
func TestVersionVerb(t *testing.T) {
	nowhere := filepath.Join(t.TempDir(), "no.sock")
	code, out, errOut := runCLI(t, nowhere, "version")
	if code != 0 || !strings.HasPrefix(out, "warren ") || !strings.Contains(out, "go1.") || !strings.Contains(out, "daemon: none answers on "+nowhere) {
		t.Errorf("warren version, no daemon: exit %d, %q, %q", code, out, errOut)
	}
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	code, out, errOut = runCLI(t, sock, "version")
	if code != 0 || !strings.Contains(out, "daemon: warrend ") || !strings.Contains(out, "landlock") {
		t.Errorf("warren version, a daemon: exit %d, %q, %q", code, out, errOut)
	}
}
