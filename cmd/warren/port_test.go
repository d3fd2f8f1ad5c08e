package main

import (
	"encoding/json"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/testenv"
)

// TestPortVerb: warren port prints a channel's URL (the same one again),
// --json the whole channel, --close closes it; bad ports are usage
// errors.
func TestPortVerb(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	code, out, errOut := runCLI(t, sock, "port", "--thread", "dev", "3000")
	url := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(url, "http://127.0.0.1:") || strings.Contains(url, "\n") {
		t.Fatalf("warren port: exit %d, %q, %q; want the channel's URL alone", code, out, errOut)
	}
	code, out, errOut = runCLI(t, sock, "port", "--thread", "dev", "--json", "3000")
	var ch api.PortChannel
	if code != 0 || json.Unmarshal([]byte(out), &ch) != nil {
		t.Fatalf("warren port --json: exit %d, %q, %q", code, out, errOut)
	}
	if ch.URL != url || ch.Token == "" || ch.Headers["Authorization"] != "Bearer "+ch.Token || ch.Port != 3000 {
		t.Errorf("warren port --json: %+v; want the channel of %s with its token", ch, url)
	}
	if code, out, errOut = runCLI(t, sock, "port", "--thread", "dev", "--close", "3000"); code != 0 || out != "closed port 3000 of default/dev\n" {
		t.Errorf("warren port --close: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut = runCLI(t, sock, "port", "--thread", "dev", "--close", "3000"); code != 0 || !strings.Contains(out, "no channel was open") {
		t.Errorf("warren port --close again: exit %d, %q, %q", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"port", "--thread", "dev"}, "give one PORT"},
		{[]string{"port", "--thread", "dev", "0"}, "not a number from 1 to 65535"},
		{[]string{"port", "--thread", "dev", "http"}, "not a number from 1 to 65535"},
		{[]string{"port", "--thread", "dev", "--close", "70000"}, "not a number from 1 to 65535"},
		{[]string{"port", "--thread", "dev", "--close", "3000", "3001"}, "takes no other argument"},
		{[]string{"port", "3000"}, "--thread is required"},
	} {
		if code, _, errOut := runCLI(t, sock, tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("warren %s: exit %d, %q; want 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
}
