package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/cli"
	"warren/internal/testenv"
)

// TestEventsVerb follows one thread's events with warren events while
// other verbs change threads, then interrupts it.
func TestEventsVerb(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	var out, errOut testenv.SyncBuffer
	e := streamEnv(sock, &out, &errOut)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, e, []string{"events", "--thread", "t1"}) }()

	// The stream may not be subscribed yet when the first bind happens:
	// bind and close until its events show.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), `"thread.closed"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no thread events after 20s; stdout %q, stderr %q", out.String(), errOut.String())
		}
		for _, args := range [][]string{
			{"bind", "--thread", "t1"},
			{"bind", "--thread", "t2"}, // not followed
			{"close", "--thread", "t1"},
		} {
			if code, _, stderr := runCLI(t, sock, args...); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	interrupt()
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("interrupted warren events: got exit %d (stderr %q), want 0", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("warren events did not stop when interrupted")
	}

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var last api.EventType
	for i, line := range lines {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %d %q is not a JSON event: %v", i, line, err)
		}
		if ev.Tenant != api.DefaultTenant || ev.Thread != "t1" {
			t.Errorf("line %d: got an event of %s/%s, want only default/t1", i, ev.Tenant, ev.Thread)
		}
		if (ev.Type != api.EventThreadBound && ev.Type != api.EventThreadClosed) || ev.Type == last {
			t.Errorf("line %d: got %s after %q, want thread.bound and thread.closed in turn", i, ev.Type, last)
		}
		last = ev.Type
	}
}

func TestEventsVerbErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantErrOut string
	}{
		{"stray argument", []string{"events", "extra"}, 2, "unexpected arguments"},
		{"unknown flag", []string{"events", "--job", "j"}, 2, "flag provided but not defined"},
		{"help", []string{"events", "-h"}, 0, "usage: warren events"},
		{"no gateway", []string{"events", "--socket", filepath.Join(t.TempDir(), "none.sock")}, 1, "is 'warren serve' running?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErrOut) || out != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tt.wantCode, tt.wantErrOut)
			}
		})
	}
	// A refused filter is the gateway's answer, said as it is.
	sock := startGateway(t)
	code, _, errOut := runCLI(t, sock, "events", "--thread", strings.Repeat("x", api.MaxIDBytes+1))
	if code != 1 || !strings.Contains(errOut, "more than 1024") {
		t.Errorf("got exit %d, stderr %q; want 1 and the gateway's reason", code, errOut)
	}
}

// TestEventsSince: events --since replays the kept events after that seq
// before it follows, so a client that was away misses nothing; a seq that
// is not a number is a usage error.
func TestEventsSince(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	for _, args := range [][]string{{"bind", "--thread", "past"}, {"close", "--thread", "past"}} {
		if code, _, errOut := runCLI(t, sock, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	var out, errOut testenv.SyncBuffer
	e := streamEnv(sock, &out, &errOut)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, e, []string{"events", "--thread", "past", "--since", "0"}) }()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), `"thread.closed"`); {
		if time.Now().After(deadline) {
			t.Fatalf("the events before the stream were not replayed; stdout %q, stderr %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), `"thread.bound"`) {
		t.Errorf("replay lacks the bind: %q", out.String())
	}
	interrupt()
	if code := <-exit; code != 0 {
		t.Errorf("interrupted warren events: exit %d, %q", code, errOut.String())
	}
	if code, _, errOut := runCLI(t, sock, "events", "--since", "yesterday"); code != 2 || !strings.Contains(errOut, "is not an event's seq") {
		t.Errorf("events --since yesterday: exit %d, %q; want a usage error", code, errOut)
	}
}

// streamEnv is the environment of a command line that runs while the test
// reads its output: WARREN_SOCKET is sock, the outputs are out and errOut.
func streamEnv(sock string, out, errOut *testenv.SyncBuffer) *cli.Env {
	return &cli.Env{Stdout: out, Stderr: errOut, Getenv: func(k string) string {
		if k == "WARREN_SOCKET" {
			return sock
		}
		return ""
	}}
}
