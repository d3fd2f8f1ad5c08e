package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
	"warren/internal/testenv"
)

// TestProgressBar: checkpoint, undo, fork and delete draw a progress bar
// on stderr when it is a terminal, a bar per phase of the call, and print
// their usual line on stdout; when stderr is not a terminal they print
// nothing there.
func TestProgressBar(t *testing.T) {
	testenv.RequireRootFUSE(t)
	sock := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(sock)
	write := func(content string) {
		t.Helper()
		for i := range 60 {
			if _, err := c.WriteFile(ctx, "default", "p1", api.WriteFileRequest{Path: fmt.Sprintf("d%d/f%d", i%3, i), Content: content}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("one")

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}); err != nil { // a terminal of no width shows no bar
		t.Fatal(err)
	}
	var drawn bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		io.Copy(&drawn, ptmx) // until the terminal closes (EIO)
	}()
	var out bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: tty, Getenv: func(string) string { return "" }}
	for _, args := range [][]string{
		{"checkpoint", "--thread", "p1"},
		{"write"},
		{"checkpoint", "--thread", "p1"},
		{"undo", "--thread", "p1"},
		{"fork", "--thread", "p1", "--to", "p2"},
		{"delete", "--thread", "p2"},
	} {
		if args[0] == "write" {
			write("two!")
			continue
		}
		if code := run(ctx, e, append(args, "--socket", sock)); code != 0 {
			tty.Close()
			<-read
			t.Fatalf("warren %q: exit %d; stdout %q, terminal %q", args, code, out.String(), drawn.String())
		}
	}
	tty.Close()
	<-read
	for _, want := range []string{"reading the workspace", "writing the workspace", "removing the files", "%"} {
		if !strings.Contains(drawn.String(), want) {
			t.Errorf("the terminal shows %q, want %q in it", drawn.String(), want)
		}
	}
	for _, want := range []string{"cp-1 (60 files", "undo: at cp-1, 60 paths changed", "p2\t", "deleted default/p2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout %q, want %q in it", out.String(), want)
		}
	}

	// Not a terminal: no bar.
	if code, stdout, stderr := runCLI(t, sock, "revert", "--thread", "p1", "cp-2"); code != 0 || stderr != "" || !strings.Contains(stdout, "revert: at cp-2") {
		t.Errorf("warren revert, stderr not a terminal: exit %d, stdout %q, stderr %q; want no bar", code, stdout, stderr)
	}
}
