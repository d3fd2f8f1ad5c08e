package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// TestProgressStreams: a checkpoint, an undo, a redo, a revert, a fork
// and a delete asked for their progress answer NDJSON {done,total,phase}
// frames, done never going back in a phase, the last one all of the work
// (the files read, the changes written, the top folder's entries
// removed; a restore first reads what the workspace holds), then the
// call's own answer; asked with Accept: application/x-ndjson or
// ?progress=1. A refusal before the work is the usual status and error;
// a bad progress value is refused; unasked, the answer is plain JSON.
func TestProgressStreams(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.c
	const dirs, perDir = 4, 30
	write := func(content string) {
		t.Helper()
		for d := range dirs {
			for f := range perDir {
				if _, err := c.WriteFile(ctx, "acme", "big", api.WriteFileRequest{Path: fmt.Sprintf("d%d/f%d.txt", d, f), Content: content}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write("one")
	var frames []api.Progress
	pctx := client.WithProgress(ctx, func(p api.Progress) { frames = append(frames, p) })
	// check checks the frames of one call and empties them.
	check := func(call, phase string, wantDone, wantTotal int64) {
		t.Helper()
		defer func() { frames = nil }()
		if len(frames) == 0 {
			t.Errorf("%s: no progress frame", call)
			return
		}
		for i, f := range frames {
			if i > 0 && f.Phase == frames[i-1].Phase && f.Done < frames[i-1].Done || f.Total != 0 && f.Done > f.Total {
				t.Errorf("%s: frame %d %+v of %+v: want done growing in a phase, up to total", call, i, f, frames)
			}
		}
		if last := frames[len(frames)-1]; last.Done != wantDone || last.Total != wantTotal || last.Phase != phase {
			t.Errorf("%s: last frame %+v of %+v, want done %d of %d, phase %q", call, last, frames, wantDone, wantTotal, phase)
		}
	}

	if _, err := c.Checkpoint(pctx, "acme", "big", api.CheckpointRequest{Label: "one"}); err != nil {
		t.Fatal(err)
	}
	check("checkpoint", "read", dirs*perDir, 0) // the first: its total is not known
	write("two!")
	cp2, err := c.Checkpoint(pctx, "acme", "big", api.CheckpointRequest{Label: "two"})
	if err != nil || cp2.Checkpoint.ID != "cp-2" {
		t.Fatalf("second checkpoint: %+v, %v", cp2, err)
	}
	frames = nil // an incremental one reads what changed: no total either

	r, err := c.Undo(pctx, "acme", "big", false)
	if err != nil || r.To != "cp-1" {
		t.Fatalf("undo: %+v, %v", r, err)
	}
	check("undo", "write", dirs*perDir, dirs*perDir)
	if _, err := c.Redo(pctx, "acme", "big", false); err != nil {
		t.Fatal(err)
	}
	check("redo", "write", dirs*perDir, dirs*perDir)
	if _, err := c.Revert(pctx, "acme", "big", "cp-1", false); err != nil {
		t.Fatal(err)
	}
	check("revert", "write", dirs*perDir, dirs*perDir)
	f, err := c.Fork(pctx, "acme", "big", api.ForkRequest{Thread: "twin", Checkpoint: "cp-2"})
	if err != nil || f.Checkpoint != "cp-1" {
		t.Fatalf("fork: %+v, %v", f, err)
	}
	check("fork", "write", dirs*(perDir+2), dirs*(perDir+2)) // each folder made, and its mode set
	if got, err := c.ReadFile(ctx, "acme", "twin", api.ReadFileRequest{Path: "d3/f7.txt"}); err != nil || got.Content != "two!" {
		t.Errorf("the fork's file: %+v, %v", got, err)
	}
	if err := c.DeleteThread(pctx, "acme", "twin"); err != nil {
		t.Fatal(err)
	}
	check("delete", "remove", dirs, dirs)

	// Refused before the work: the usual error, not a stream.
	if _, err := c.Undo(pctx, "acme", "tpyo", false); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("undo of a thread that does not exist, with progress: %v, want not found", err)
	}

	// On the wire: the header or the query, the content type, the frames
	// and the answer last.
	hc := unixHTTP(env.g.SocketPath())
	post := func(path, body string, header bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://warren/v1/tenants/acme/threads/big"+path, strings.NewReader(body))
		if header {
			req.Header.Set("Accept", "application/json, application/x-ndjson")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		path, body string
		header     bool
	}{{"/revert", `{"checkpoint":"cp-2"}`, true}, {"/revert?progress=1", `{"checkpoint":"cp-1"}`, false}} {
		resp := post(tc.path, tc.body, tc.header)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.ContentTypeNDJSON {
			t.Fatalf("POST %s: %s, %q", tc.path, resp.Status, resp.Header.Get("Content-Type"))
		}
		var lines []string
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			lines = append(lines, sc.Text())
		}
		if len(lines) < 2 || !strings.HasPrefix(lines[0], `{"done":`) || !strings.Contains(lines[len(lines)-2], `"phase":"write"`) ||
			!strings.HasPrefix(lines[len(lines)-1], `{"result":{"op":"revert"`) {
			t.Errorf("POST %s: %q, want progress frames then the result", tc.path, lines)
		}
	}
	for _, tc := range []struct {
		path       string
		wantStatus int
		wantType   string
	}{
		{"/revert?progress=maybe", http.StatusBadRequest, "application/json"},
		{"/revert?progress=1&x=2", http.StatusBadRequest, "application/json"},
		{"/revert?progress=0", http.StatusOK, "application/json"},
	} {
		if resp := post(tc.path, `{"checkpoint":"cp-1"}`, false); resp.StatusCode != tc.wantStatus || resp.Header.Get("Content-Type") != tc.wantType {
			t.Errorf("POST %s: %s, %q; want %d, %s", tc.path, resp.Status, resp.Header.Get("Content-Type"), tc.wantStatus, tc.wantType)
		}
	}
}
