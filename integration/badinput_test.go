package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// apiCaller sends raw requests to a daemon's socket: bodies and targets go
// out exactly as a test writes them, hostile or not.
type apiCaller struct {
	t  testing.TB
	hc *http.Client
}

func newAPICaller(t testing.TB, sock string) *apiCaller {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &apiCaller{t: t, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

// call sends one request; a nil body sends none.
func (c *apiCaller) call(method, target string, body []byte) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://warren"+target, rd)
	if err != nil {
		c.t.Fatalf("%s %.80s: %v", method, target, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %.80s: %v", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %.80s: read answer: %v", method, target, err)
	}
	return resp.StatusCode, data
}

// TestHostileInput sends every call of the API inputs an attacker (or a
// buggy harness) would: oversized fields, NUL bytes, non-UTF-8, wrong
// types, a body that is not an object, numbers out of range, negative
// sizes, pids that are not a run's to claim. Each is refused with the
// status the table names, never a 500, with a short JSON error that quotes
// at most a bounded prefix of what was sent; and the daemon goes on
// serving.
func TestHostileInput(t *testing.T) {
	d := newDaemon(t)
	mnt := d.bind("default", "t")
	c := newAPICaller(t, d.socket)
	const th = "/v1/tenants/default/threads/t"

	// A running job of thread t, for the job calls.
	if st, body := c.call("POST", th+"/jobs", []byte(`{"command":"sleep 600"}`)); st != 200 {
		t.Fatalf("spawn: %d %s", st, body)
	}
	t.Cleanup(func() { c.call("POST", th+"/jobs/bash-1/stop", nil) })

	big := strings.Repeat("a", 5000)
	huge := strings.Repeat("b", 10<<20)
	longName := strings.Repeat("c", 300) // over NAME_MAX, under PATH_MAX
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	obj := func(kv ...string) []byte {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < len(kv); i += 2 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%q:%s", kv[i], kv[i+1])
		}
		b.WriteString("}")
		return []byte(b.String())
	}
	// A JSON string holding the bytes 0xff 0xfe: not UTF-8.
	notUTF8 := []byte(`{"path":"` + "\xff\xfe" + `"}`)

	cases := []struct {
		name         string
		method, path string
		body         []byte
		want         int
	}{
		// bind
		{"bind null", "POST", th + "/bind", []byte(`null`), 400},
		{"bind array", "POST", th + "/bind", []byte(`[]`), 400},
		{"bind number", "POST", th + "/bind", []byte(`7`), 400},
		{"bind settings array", "POST", th + "/bind", obj("settings", "[]"), 400},
		{"bind negative memory", "POST", th + "/bind", obj("settings", `{"memoryBytes":-1}`), 400},
		{"bind negative procs", "POST", th + "/bind", obj("settings", `{"maxProcs":-5}`), 400},
		{"bind memory overflow", "POST", th + "/bind", obj("settings", `{"memoryBytes":1e40}`), 400},
		{"bind long tenant", "POST", "/v1/tenants/" + big + "/threads/t/bind", nil, 400},
		{"bind long thread", "POST", "/v1/tenants/default/threads/" + big + "/bind", nil, 400},
		{"thread NUL id", "GET", "/v1/tenants/default/threads/a%00b", nil, 404},
		{"close null", "POST", th + "/close", []byte(`null`), 400},
		{"unpin null", "POST", th + "/unpin", []byte(`null`), 400},
		{"threads long tenant", "GET", "/v1/threads?tenant=" + big, nil, 200},
		{"threads unknown query", "GET", "/v1/threads?x=" + big, nil, 400},
		// files
		{"read null", "POST", th + "/files/read", []byte(`null`), 400},
		{"read array", "POST", th + "/files/read", []byte(`[]`), 400},
		{"read path 5000", "POST", th + "/files/read", obj("path", q(big)), 400},
		{"read path 10MB", "POST", th + "/files/read", obj("path", q(huge)), 400},
		{"read long name", "POST", th + "/files/read", obj("path", q(longName)), 400},
		{"read path NUL", "POST", th + "/files/read", obj("path", q("a\x00b")), 400},
		{"read path empty", "POST", th + "/files/read", obj("path", `""`), 400},
		{"read path not UTF-8", "POST", th + "/files/read", notUTF8, 404},
		{"read path number", "POST", th + "/files/read", obj("path", "7"), 400},
		{"read run NUL", "POST", th + "/files/read", obj("path", `"x"`, "run", q("r\x00")), 400},
		{"read run long", "POST", th + "/files/read", obj("path", `"x"`, "run", q(big)), 400},
		{"write null", "POST", th + "/files/write", []byte(`null`), 400},
		{"write path 5000", "POST", th + "/files/write", obj("path", q(big), "content", `"x"`), 400},
		{"write path 10MB", "POST", th + "/files/write", obj("path", q(huge), "content", `"x"`), 400},
		{"write long name", "POST", th + "/files/write", obj("path", q(longName), "content", `"x"`), 400},
		{"write path NUL", "POST", th + "/files/write", obj("path", q("a\x00b"), "content", `"x"`), 400},
		{"write content number", "POST", th + "/files/write", obj("path", `"x"`, "content", "7"), 400},
		{"write bad encoding", "POST", th + "/files/write", obj("path", `"x"`, "content", `"x"`, "encoding", q(big)), 400},
		{"write bad base64", "POST", th + "/files/write", obj("path", `"x"`, "content", q("%%"+big), "encoding", `"base64"`), 400},
		{"edit null", "POST", th + "/files/edit", []byte(`null`), 400},
		{"edit path 5000", "POST", th + "/files/edit", obj("path", q(big), "old", `"a"`, "new", `"b"`), 400},
		{"edit path 10MB", "POST", th + "/files/edit", obj("path", q(huge), "old", `"a"`, "new", `"b"`), 400},
		{"edit path NUL", "POST", th + "/files/edit", obj("path", q("a\x00b"), "old", `"a"`, "new", `"b"`), 400},
		{"edit all string", "POST", th + "/files/edit", obj("path", `"x"`, "old", `"a"`, "new", `"b"`, "all", `"yes"`), 400},
		// runs
		{"runs null", "POST", th + "/runs", []byte(`null`), 400},
		{"runs pid 1", "POST", th + "/runs", obj("pid", "1", "run", `"r"`), 400},
		{"runs daemon pid", "POST", th + "/runs", obj("pid", fmt.Sprint(d.pid()), "run", `"r"`), 400},
		{"runs pid 0", "POST", th + "/runs", obj("pid", "0", "run", `"r"`), 400},
		{"runs pid negative", "POST", th + "/runs", obj("pid", "-5", "run", `"r"`), 400},
		{"runs pid absent", "POST", th + "/runs", obj("pid", "2147483647", "run", `"r"`), 404},
		{"runs daemon thread", "POST", th + "/runs", obj("pid", fmt.Sprint(daemonThread(t, d.pid())), "run", `"r"`), 400},
		{"runs pid overflow", "POST", th + "/runs", obj("pid", "1e30", "run", `"r"`), 400},
		{"runs pid string", "POST", th + "/runs", obj("pid", `"1"`, "run", `"r"`), 400},
		{"runs run NUL", "POST", th + "/runs", obj("pid", fmt.Sprint(os.Getpid()), "run", q("r\x00")), 400},
		{"runs/end null", "POST", th + "/runs/end", []byte(`null`), 400},
		{"runs/end run long", "POST", th + "/runs/end", obj("run", q(big)), 400},
		// exec
		{"exec null", "POST", th + "/exec", []byte(`null`), 400},
		{"exec array", "POST", th + "/exec", []byte(`[]`), 400},
		{"exec command NUL", "POST", th + "/exec", obj("command", q("echo a\x00b")), 400},
		{"exec command over 128 KiB", "POST", th + "/exec", obj("command", q(strings.Repeat("x", 200<<10))), 400},
		{"exec env over 64 KiB", "POST", th + "/exec", obj("command", `"true"`, "env", `{"A":`+q(strings.Repeat("x", 70<<10))+`}`), 400},
		{"exec cwd 5000", "POST", th + "/exec", obj("command", `"true"`, "cwd", q(big)), 400},
		{"exec cwd NUL", "POST", th + "/exec", obj("command", `"true"`, "cwd", q("a\x00b")), 400},
		{"exec cwd outside", "POST", th + "/exec", obj("command", `"true"`, "cwd", `"/etc"`), 403},
		{"exec env NUL", "POST", th + "/exec", obj("command", `"true"`, "env", `{"A":"b\u0000c"}`), 400},
		{"exec env bad name", "POST", th + "/exec", obj("command", `"true"`, "env", `{"A=B":"x"}`), 400},
		{"exec env number", "POST", th + "/exec", obj("command", `"true"`, "env", `{"A":1}`), 400},
		{"exec timeout negative", "POST", th + "/exec", obj("command", `"true"`, "timeoutSeconds", "-1"), 400},
		{"exec timeout huge", "POST", th + "/exec", obj("command", `"true"`, "timeoutSeconds", "1e300"), 400},
		{"exec rows overflow", "POST", th + "/exec", obj("command", `"true"`, "tty", "true", "rows", "70000"), 400},
		{"exec rows negative", "POST", th + "/exec", obj("command", `"true"`, "tty", "true", "rows", "-1"), 400},
		{"exec run NUL", "POST", th + "/exec", obj("command", `"true"`, "run", q("r\x00")), 400},
		{"exec stdin null", "POST", th + "/exec/x/stdin", []byte(`null`), 400},
		{"exec resize null", "POST", th + "/exec/x/resize", []byte(`null`), 400},
		{"exec resize zero", "POST", th + "/exec/x/resize", obj("rows", "0", "cols", "0"), 400},
		{"exec background null", "POST", th + "/exec/x/background", []byte(`null`), 400},
		{"exec long id", "POST", th + "/exec/" + big + "/stdin", obj("data", `"x"`), 404},
		// jobs
		{"spawn null", "POST", th + "/jobs", []byte(`null`), 400},
		{"spawn command NUL", "POST", th + "/jobs", obj("command", q("echo a\x00b")), 400},
		{"spawn command over 128 KiB", "POST", th + "/jobs", obj("command", q(strings.Repeat("x", 200<<10))), 400},
		{"spawn cwd 5000", "POST", th + "/jobs", obj("command", `"true"`, "cwd", q(big)), 400},
		{"spawn cwd long name", "POST", th + "/jobs", obj("command", `"true"`, "cwd", q(longName)), 400},
		{"spawn command control bytes", "POST", th + "/jobs", obj("command", q(strings.Repeat("\x01", 120<<10))), 200},
		{"spawn label NUL", "POST", th + "/jobs", obj("command", `"true"`, "label", q("a\x00b")), 400},
		{"spawn label long", "POST", th + "/jobs", obj("command", `"true"`, "label", q(strings.Repeat("l", 200<<10))), 400},
		{"spawn user NUL", "POST", th + "/jobs", obj("command", `"true"`, "user", q("a\x00b")), 400},
		{"job long id", "GET", th + "/jobs/" + big, nil, 400},
		{"job output negative offset", "GET", th + "/jobs/bash-1/output?offset=-1", nil, 400},
		{"job output bad offset", "GET", th + "/jobs/bash-1/output?offset=" + big, nil, 400},
		{"job output bad follow", "GET", th + "/jobs/bash-1/output?follow=" + big, nil, 400},
		{"job stop null", "POST", th + "/jobs/bash-1/stop", []byte(`null`), 400},
		{"job stop negative grace", "POST", th + "/jobs/bash-1/stop", obj("graceSeconds", "-1"), 400},
		{"job stdin null", "POST", th + "/jobs/bash-1/stdin", []byte(`null`), 400},
		{"job stdin data number", "POST", th + "/jobs/bash-1/stdin", obj("data", "1"), 400},
		// inspection mounts
		{"mount null", "POST", "/v1/mounts", []byte(`null`), 400},
		{"mount array", "POST", "/v1/mounts", []byte(`[]`), 400},
		{"mount path 5000", "POST", "/v1/mounts", obj("thread", `"t"`, "path", q("/tmp/"+big)), 400},
		{"mount path 10MB", "POST", "/v1/mounts", obj("thread", `"t"`, "path", q("/tmp/"+huge)), 413}, // over the 1 MiB body bound
		{"mount path NUL", "POST", "/v1/mounts", obj("thread", `"t"`, "path", q("/tmp/a\x00b")), 400},
		{"mount long name", "POST", "/v1/mounts", obj("thread", `"t"`, "path", q("/tmp/"+longName)), 400},
		{"mount writable string", "POST", "/v1/mounts", obj("thread", `"t"`, "path", `"/tmp/x"`, "writable", `"yes"`), 400},
		{"mount thread long", "POST", "/v1/mounts", obj("thread", q(big), "path", `"/tmp/x"`), 400},
		{"unmount path 5000", "DELETE", "/v1/mounts?path=/tmp/" + big, nil, 400},
		{"unmount path NUL", "DELETE", "/v1/mounts?path=/tmp/a%00b", nil, 400},
		{"unmount path twice", "DELETE", "/v1/mounts?path=a&path=b", nil, 400},
		{"events bad query", "GET", "/v1/events?x=" + big, nil, 400},
		{"hosts bad query", "GET", "/v1/hosts?x=" + big, nil, 400},
		{"no route long", "GET", "/v1/" + big, nil, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newAPICaller(t, d.socket)
			st, body := c.call(tc.method, tc.path, tc.body)
			if st != tc.want {
				t.Errorf("%s %.60s: got status %d, want %d: %.300s", tc.method, tc.path, st, tc.want, body)
			}
			if st == 200 {
				return
			}
			checkErrorBody(t, body)
		})
	}

	// The daemon still serves, and its mount is alive.
	if _, err := os.Stat(mnt); err != nil {
		t.Fatalf("mount after the hostile calls: %v", err)
	}
	if st, body := c.call("GET", th, nil); st != 200 {
		t.Fatalf("thread after the hostile calls: %d %s", st, body)
	}
}

// maxErrorAnswer bounds an error answer: a JSON envelope around a message
// that quotes at most a bounded prefix of what the client sent.
const maxErrorAnswer = 2048

// checkErrorBody asserts a short JSON error that does not echo a long run
// of the request.
func checkErrorBody(t testing.TB, body []byte) {
	t.Helper()
	if len(body) > maxErrorAnswer {
		t.Errorf("error answer is %d bytes, more than %d: %.300s...", len(body), maxErrorAnswer, body)
	}
	var eb struct {
		Error *struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil || eb.Error.Message == "" {
		t.Errorf("answer is not a JSON error: %v: %.300s", err, body)
	}
	for _, run := range []string{"aaaa", "bbbb", "cccc", "xxxx", "llll"} {
		if strings.Contains(string(body), strings.Repeat(run, 100)) {
			t.Errorf("error answer echoes 400+ bytes of the request: %.300s", body)
		}
	}
}

// daemonThread returns a thread id of process pid other than pid itself.
func daemonThread(t testing.TB, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			return tid
		}
	}
	t.Fatalf("process %d has no thread but its main one", pid)
	return 0
}
