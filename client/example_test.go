package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"warren/api"
	"warren/client"
)

// Binding a thread gives it a workspace, mounted where the answer says.
// Binding it again returns the same binding.
func ExampleClient_Bind() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	b, err := c.Bind(ctx, "examples", "bind")
	// Deleting the thread removes its workspace and records.
	defer c.DeleteThread(ctx, "examples", "bind")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(b.Binding.State, b.Binding.Mounted, strings.HasSuffix(b.MountPath, "/mnt/examples/bind"))
	again, err := c.Bind(ctx, "examples", "bind")
	fmt.Println(again.MountPath == b.MountPath, err)
	// Output:
	// bound true true
	// true <nil>
}

// A command runs in the thread's jail, with the workspace at /workspace;
// its output streams to the writers given, and Exec returns its exit code.
// The first command binds the thread if it is not bound.
func ExampleClient_Exec() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	defer c.DeleteThread(ctx, "examples", "exec")
	var stderr strings.Builder
	code, err := c.Exec(ctx, "examples", "exec", api.ExecRequest{
		Command: `echo "hello from $(pwd)"; echo oops >&2; exit 3`,
	}, os.Stdout, &stderr)
	fmt.Printf("exit %d, stderr %q, %v\n", code, stderr.String(), err)
	// Output:
	// hello from /workspace
	// exit 3, stderr "oops\n", <nil>
}

// The file API reads and writes a thread's files for an agent run. A run
// that edits a file it read before another run changed it is refused:
// the error matches api.ErrStale.
func ExampleFiles_Write() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	const tenant, thread = "examples", "files"
	defer c.DeleteThread(ctx, tenant, thread)
	if _, err := c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: "src/app.ts", Run: "lead", Content: "let a = 1\n"}); err != nil {
		fmt.Println(err)
		return
	}
	// A sub-agent reads the file and edits it.
	r, err := c.Files().Read(ctx, tenant, thread, api.ReadFileRequest{Path: "src/app.ts", Run: "lead/sub-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("sub-1 read %q\n", r.Content)
	if _, err := c.Files().Edit(ctx, tenant, thread, api.EditFileRequest{Path: "src/app.ts", Run: "lead/sub-1", Old: "a = 1", New: "a = 2"}); err != nil {
		fmt.Println(err)
		return
	}
	// The lead's view of the file is older than sub-1's edit.
	_, err = c.Files().Edit(ctx, tenant, thread, api.EditFileRequest{Path: "src/app.ts", Run: "lead", Old: "let", New: "const"})
	fmt.Println("lead's edit refused as stale:", errors.Is(err, api.ErrStale))
	r, _ = c.Files().Read(ctx, tenant, thread, api.ReadFileRequest{Path: "src/app.ts", Run: "lead"})
	fmt.Printf("the file holds %q\n", r.Content)
	// Output:
	// sub-1 read "let a = 1\n"
	// lead's edit refused as stale: true
	// the file holds "let a = 2\n"
}

// A background job runs in the thread's jail while the client goes on; its
// output is kept, and JobOutput with follow reads it until the job ends.
func ExampleClient_Spawn() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	defer c.DeleteThread(ctx, "examples", "jobs")
	job, err := c.Spawn(ctx, "examples", "jobs", api.SpawnRequest{Command: "echo serving; echo done", Label: "server"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.ID, job.Label)
	err = c.JobOutput(ctx, "examples", "jobs", job.ID, 0, true, func(f api.JobFrame) error {
		fmt.Print(f.Data)
		if f.End {
			fmt.Println("exit", *f.Exit)
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// bash-1 server
	// serving
	// done
	// exit 0
	// <nil>
}

// Every error answer is an *api.APIError that matches the sentinel of its
// code with errors.Is, so a caller branches without reading messages.
func ExampleClient_Thread_notFound() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	_, err := c.Thread(ctx, "examples", "never-bound")
	switch {
	case errors.Is(err, api.ErrNotFound):
		fmt.Println("not bound")
	case errors.Is(err, api.ErrUnavailable):
		fmt.Println("the store did not answer: retry later")
	case errors.Is(err, api.ErrClosed):
		fmt.Println("the daemon is shutting down: reconnect later")
	case err != nil:
		fmt.Println("failed:", err)
	}
	var apiErr *api.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code)
	}
	// Output:
	// not bound
	// 404 not_found
}

// A sandbox provider works on a thread's tree: raw content of any size
// streams in and out (here from a reader, and to stdout), folders are
// listed, entries moved and removed. Every call goes through the same
// versions as the file API: a run that read a file before another changed
// it cannot remove or replace it.
func ExampleFiles_WriteRaw() {
	ctx := context.Background()
	c := client.New(socketPath)
	defer c.CloseIdleConnections()

	const tenant, thread = "examples", "tree"
	defer c.DeleteThread(ctx, tenant, thread)
	if err := c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "assets/img", Parents: true}); err != nil {
		fmt.Println(err)
		return
	}
	w, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "assets/img/logo.bin", Run: "lead"}, strings.NewReader("logo v1\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("wrote", w.Size, "bytes")
	ls, _ := c.Files().List(ctx, tenant, thread, api.ListRequest{Path: "assets/img"})
	for _, e := range ls.Entries {
		fmt.Printf("%s %s %d %o\n", e.Path, e.Type, e.Size, e.Mode)
	}
	if _, err := c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "assets/img/logo.bin", To: "assets/logo.bin", Run: "lead"}); err != nil {
		fmt.Println(err)
		return
	}
	// sub-1 reads the file; the lead, whose own write is as good as a
	// read, replaces it; sub-1 may not remove what it has not seen.
	if _, err := c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: "assets/logo.bin", Run: "lead/sub-1"}, os.Stdout); err != nil {
		fmt.Println(err)
		return
	}
	c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "assets/logo.bin", Run: "lead"}, strings.NewReader("v2\n"))
	_, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "assets", Run: "lead/sub-1", Recursive: true})
	fmt.Println("sub-1's remove refused as stale:", errors.Is(err, api.ErrStale))
	rm, err := c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "assets", Run: "lead", Recursive: true})
	fmt.Println("lead removed", rm.Removed, "entries", err)
	ex, _ := c.Files().Exists(ctx, tenant, thread, api.ExistsRequest{Path: "assets"})
	fmt.Println("assets exists:", ex.Exists)
	// Output:
	// wrote 8 bytes
	// assets/img/logo.bin file 8 644
	// logo v1
	// sub-1's remove refused as stale: true
	// lead removed 3 entries <nil>
	// assets exists: false
}
