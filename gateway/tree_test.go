package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/testenv"
)

// wantAPIError fails the test unless err is an error answer of status
// and code whose message holds msg.
func wantAPIError(t *testing.T, what string, err error, status int, code, msg string) {
	t.Helper()
	var ae *api.APIError
	if !errors.As(err, &ae) || ae.Status != status || ae.Code != code || !strings.Contains(ae.Message, msg) {
		t.Errorf("%s: %v; want %d %s with %q", what, err, status, code, msg)
	}
}

// TestTreeAPI: list, stat, exists, mkdir, remove and rename over the
// socket, each with its refusals: stale reads, conflicts, missing paths,
// paths and links that lead out, and bad input.
func TestTreeAPI(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.c
	const tenant, thread = "acme", "tree"
	bound, err := c.Bind(ctx, tenant, thread)
	if err != nil {
		t.Fatal(err)
	}
	mnt := bound.MountPath
	// The first command gives the workspace to the jail's user; what the
	// file API makes after is the user's too.
	if code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "true"}, nil, nil); err != nil || code != 0 {
		t.Fatalf("first command: %d, %v", code, err)
	}
	for _, p := range []string{"src/app.ts", "src/lib/util.ts", "notes.md"} {
		if _, err := c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: p, Run: "lead", Content: "x\n"}); err != nil {
			t.Fatal(err)
		}
	}
	code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "ln -s src/app.ts link && ln -s .. src/up && chmod 600 notes.md"}, nil, nil)
	if err != nil || code != 0 {
		t.Fatalf("setup: %d, %v", code, err)
	}

	// list
	ls, err := c.Files().List(ctx, tenant, thread, api.ListRequest{Path: ".", Run: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ls.Entries {
		names = append(names, fmt.Sprintf("%s %s %o %s", e.Path, e.Type, e.Mode, e.Target))
	}
	if want := []string{"link symlink 777 src/app.ts", "notes.md file 600 ", "src dir 755 "}; !equalStrings(names, want) {
		t.Errorf("list .: %q, want %q", names, want)
	}
	ls, err = c.Files().List(ctx, tenant, thread, api.ListRequest{Path: filepath.Join(mnt, "src")})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Entries) != 3 || ls.Entries[0].Path != "src/app.ts" || ls.Entries[0].Size != 2 || ls.Entries[0].Version == 0 ||
		ls.Entries[0].MTime.IsZero() || ls.Entries[2].Name != "up" || ls.Entries[2].Target != ".." {
		t.Errorf("list of the mount's src: %+v", ls)
	}
	_, err = c.Files().List(ctx, tenant, thread, api.ListRequest{Path: "notes.md"})
	wantAPIError(t, "list a file", err, http.StatusBadRequest, api.CodeInvalid, "notes.md is not a folder.")
	_, err = c.Files().List(ctx, tenant, thread, api.ListRequest{Path: "nothing"})
	wantAPIError(t, "list nothing", err, http.StatusNotFound, api.CodeNotFound, "nothing: no such file.")

	// stat and exists
	st, err := c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: "link"})
	if err != nil || st.Type != api.TypeSymlink || st.Target != "src/app.ts" || st.Path != "link" {
		t.Errorf("stat link: %+v, %v", st, err)
	}
	st, err = c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: "link", Follow: true})
	if err != nil || st.Type != api.TypeFile || st.Size != 2 || st.Mode != 0o644 || st.Version != ls.Entries[0].Version {
		t.Errorf("stat link, followed: %+v, %v; want the file at version %d", st, err, ls.Entries[0].Version)
	}
	_, err = c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: "src/missing"})
	wantAPIError(t, "stat missing", err, http.StatusNotFound, api.CodeNotFound, "src/missing: no such file.")
	// Links planted in the backing folder, behind the mount's back.
	backing := filepath.Join(env.cfg.DataDir, "workspaces", tenant, thread)
	if err := os.Symlink("/etc", filepath.Join(backing, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../..", filepath.Join(backing, "up3")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"abs/passwd", "up3/x", "src/up/up3"} {
		_, err = c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: p, Follow: true})
		wantAPIError(t, "stat through a link out", err, http.StatusForbidden, api.CodeOutside, p+" is outside the workspace.")
	}
	if st, err := c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: "abs"}); err != nil || st.Target != "/etc" {
		t.Errorf("stat of the link out itself: %+v, %v", st, err)
	}
	if err := os.Symlink("loop", filepath.Join(backing, "loop")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Files().Stat(ctx, tenant, thread, api.StatRequest{Path: "loop", Follow: true})
	wantAPIError(t, "stat a loop of links", err, http.StatusBadRequest, api.CodeInvalid, "loop: too many links in a chain")
	if ex, err := c.Files().Exists(ctx, tenant, thread, api.ExistsRequest{Path: "loop"}); err != nil || ex.Exists {
		t.Errorf("exists of a loop of links: %+v, %v", ex, err)
	}
	if _, err := c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "loop"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Files().List(ctx, tenant, thread, api.ListRequest{Path: "up3"})
	wantAPIError(t, "list through a link out", err, http.StatusForbidden, api.CodeOutside, "up3 is outside the workspace.")
	for _, p := range []string{"abs", "up3"} {
		if _, err := c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: p}); err != nil {
			t.Fatalf("remove the link %s: %v", p, err)
		}
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("removing a link to /etc: %v", err)
	}
	for _, x := range []struct {
		path string
		ok   bool
		typ  string
	}{{"src", true, "dir"}, {"link", true, "file"}, {"src/nothing", false, ""}, {"nothing/deeper", false, ""}} {
		ex, err := c.Files().Exists(ctx, tenant, thread, api.ExistsRequest{Path: x.path})
		if err != nil || ex.Exists != x.ok || ex.Type != x.typ || ex.Path != x.path {
			t.Errorf("exists %s: %+v, %v; want %v %q", x.path, ex, err, x.ok, x.typ)
		}
	}
	_, err = c.Files().Exists(ctx, tenant, thread, api.ExistsRequest{Path: "/etc/passwd"})
	wantAPIError(t, "exists /etc/passwd", err, http.StatusForbidden, api.CodeOutside, "/etc/passwd is outside the workspace.")

	// mkdir
	mode := uint32(0o700)
	if err := c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "build/out", Parents: true, Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if err := c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "docs"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "build", Parents: true}); err != nil {
		t.Errorf("mkdir -p of a folder there: %v", err)
	}
	err = c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "docs"})
	wantAPIError(t, "mkdir of a folder there", err, http.StatusConflict, api.CodeConflict, "docs already exists.")
	err = c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "none/x"})
	wantAPIError(t, "mkdir in a missing folder", err, http.StatusNotFound, api.CodeNotFound, "no such file.")
	bad := uint32(0o17777)
	err = c.Files().Mkdir(ctx, tenant, thread, api.MkdirRequest{Path: "bad", Mode: &bad})
	wantAPIError(t, "mkdir with a bad mode", err, http.StatusBadRequest, api.CodeInvalid, "not a permission mode")
	// The thread's mount shows them at once, modes as given.
	for p, want := range map[string]os.FileMode{"build/out": 0o700, "build": 0o700, "docs": 0o755} {
		fi, err := os.Stat(filepath.Join(mnt, p))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != want {
			t.Errorf("%s through the mount: %v, %v; want a folder %o", p, fi, err, want)
		}
	}

	// rename
	rn, err := c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "notes.md", To: "docs/notes.md", Run: "lead"})
	if err != nil || rn.Version == 0 || rn.To != "docs/notes.md" {
		t.Fatalf("rename: %+v, %v", rn, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "docs/notes.md")); err != nil {
		t.Errorf("the renamed file through the mount: %v", err)
	}
	_, err = c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "src/app.ts", To: "docs/notes.md", Run: "lead"})
	wantAPIError(t, "rename over a file", err, http.StatusConflict, api.CodeConflict, "docs/notes.md already exists.")
	// lead reads the file, sub changes it: lead's rename over it is stale.
	if _, err := c.Files().Read(ctx, tenant, thread, api.ReadFileRequest{Path: "docs/notes.md", Run: "lead"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: "docs/notes.md", Run: "sub", Content: "sub's\n"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "src/app.ts", To: "docs/notes.md", Run: "lead", Overwrite: true})
	wantAPIError(t, "stale rename over", err, http.StatusConflict, api.CodeStale, "docs/notes.md changed since it was read. Read it again before you edit it.")
	// A link carried to where it leads out.
	_, err = c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "src/up", To: "up"})
	wantAPIError(t, "rename a link out", err, http.StatusForbidden, api.CodeOutside, "a link would lead outside the workspace")
	_, err = c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "src", To: "src/lib/src"})
	wantAPIError(t, "rename into itself", err, http.StatusBadRequest, api.CodeInvalid, "cannot move into itself")
	_, err = c.Files().Rename(ctx, tenant, thread, api.RenameRequest{From: "src/app.ts", To: "../app.ts"})
	wantAPIError(t, "rename out", err, http.StatusForbidden, api.CodeOutside, "../app.ts is outside the workspace.")

	// remove
	if _, err := c.Files().Read(ctx, tenant, thread, api.ReadFileRequest{Path: "src/lib/util.ts", Run: "lead"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files().Write(ctx, tenant, thread, api.WriteFileRequest{Path: "src/lib/util.ts", Run: "sub", Content: "sub's\n"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "src", Run: "lead", Recursive: true})
	wantAPIError(t, "stale remove -r", err, http.StatusConflict, api.CodeStale, "src/lib/util.ts changed since it was read.")
	if _, err := os.Stat(filepath.Join(mnt, "src/app.ts")); err != nil {
		t.Fatalf("a refused remove removed: %v", err)
	}
	_, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "src", Run: "sub"})
	wantAPIError(t, "remove a full folder", err, http.StatusConflict, api.CodeConflict, "src is a folder that is not empty.")
	_, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "gone", Run: "sub"})
	wantAPIError(t, "remove nothing", err, http.StatusNotFound, api.CodeNotFound, "gone: no such file.")
	_, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: mnt, Run: "sub", Recursive: true})
	wantAPIError(t, "remove the root", err, http.StatusForbidden, api.CodeForbidden, "The workspace's root cannot be removed.")
	rm, err := c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "link", Run: "sub"})
	if err != nil || rm.Removed != 1 {
		t.Fatalf("remove link: %+v, %v", rm, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "src/app.ts")); err != nil {
		t.Fatalf("removing the link removed its target: %v", err)
	}
	rm, err = c.Files().Remove(ctx, tenant, thread, api.RemoveRequest{Path: "src", Run: "sub", Recursive: true})
	if err != nil || rm.Removed != 5 {
		t.Fatalf("remove -r src: %+v, %v; want 5 entries", rm, err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "src")); !os.IsNotExist(err) {
		t.Errorf("src through the mount after remove -r: %v", err)
	}

	// Refusals are logged with the thread and the path.
	var logged bool
	for _, line := range strings.Split(env.logBuf.String(), "\n") {
		if strings.Contains(line, "code=stale") && strings.Contains(line, "thread="+thread) && strings.Contains(line, "src/lib/util.ts") {
			logged = true
		}
	}
	if !logged {
		t.Error("the stale remove was not logged with its thread and path")
	}

	// Bad input.
	sock := env.g.SocketPath()
	base := "/v1/tenants/acme/threads/tree/files/"
	for _, b := range []struct{ call, body, msg string }{
		{"list", `{"path":".","recursive":true}`, `unknown field "recursive"`},
		{"stat", `{}`, "path is required"},
		{"exists", `{"path":"a\u0000b"}`, "NUL"},
		{"mkdir", `{"path":"x","mode":-1}`, "malformed JSON"},
		{"mkdir", `{"path":"x","mode":"0755"}`, "malformed JSON"},
		{"remove", `[]`, "must be a JSON object"},
		{"rename", `{"from":"a"}`, "to is required"},
	} {
		resp := rawRequest(t, sock, http.MethodPost, base+b.call, []byte(b.body))
		if e := resp.apiError(t); resp.status != http.StatusBadRequest || e.Code != api.CodeInvalid || !strings.Contains(e.Message, b.msg) {
			t.Errorf("%s %s: %d %+v; want 400 invalid with %q", b.call, b.body, resp.status, e, b.msg)
		}
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// pattern is a reader of size bytes of a pattern, which it hashes.
type pattern struct {
	left, off int64
	h         interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newPattern(size int64) *pattern { return &pattern{left: size, h: sha256.New()} }

func (p *pattern) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.left))
	for i := range n {
		x := p.off + int64(i)
		b[i] = byte(x*13 + x>>9)
	}
	p.h.Write(b[:n])
	p.left -= int64(n)
	p.off += int64(n)
	return n, nil
}

func (p *pattern) sum() string { return hex.EncodeToString(p.h.Sum(nil)) }

// TestRawAPI: 24 MiB go in and out as raw bodies (over the file API's
// 16 MiB, and over the body bound of its JSON calls, 16 MiB in base64
// and more), the content shows at once in the
// thread's jail, the answer's headers carry size and version, the runs'
// reads count, and bad input is refused.
func TestRawAPI(t *testing.T) {
	env := startEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.c
	const tenant, thread, size = "acme", "raw", 24 << 20
	// The first command gives the workspace to the jail's user; what the
	// file API makes after is the user's too.
	if code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "true"}, nil, nil); err != nil || code != 0 {
		t.Fatalf("first command: %d, %v", code, err)
	}
	in := newPattern(size)
	w, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "data/big.bin", Run: "lead"}, struct{ io.Reader }{in})
	if err != nil || w.Size != size || w.Version == 0 || w.Path != "data/big.bin" {
		t.Fatalf("PUT of 24 MiB: %+v, %v", w, err)
	}
	// The jail sees it at once, whole.
	var out bytes.Buffer
	code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "stat -c '%s %a' data/big.bin && sha256sum < data/big.bin"}, &out, &out)
	if want := fmt.Sprintf("%d 644\n%s  -\n", size, in.sum()); err != nil || code != 0 || out.String() != want {
		t.Fatalf("the jail reads %q (exit %d, %v), want %q", out.String(), code, err, want)
	}
	h := sha256.New()
	r, err := c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: "data/big.bin", Run: "sub"}, h)
	if err != nil || r.Size != size || r.Version != w.Version || hex.EncodeToString(h.Sum(nil)) != in.sum() {
		t.Fatalf("GET of 24 MiB: %+v, %v (sum %x)", r, err, h.Sum(nil))
	}

	// The headers, as curl sees them.
	hc := unixHTTP(env.g.SocketPath())
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://warren/v1/tenants/acme/threads/raw/files/raw?path=data/big.bin&run=sub")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.ContentLength != size || resp.Header.Get(api.VersionHeader) != strconv.FormatUint(w.Version, 10) {
		t.Errorf("GET raw: %d %v", resp.StatusCode, resp.Header)
	}

	// The reads count: sub read the file, lead changes it, sub's PUT is
	// stale; a new mode is set when asked.
	mode := uint32(0o600)
	if _, err := c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "data/big.bin", Run: "lead", Mode: &mode}, strings.NewReader("small\n")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "data/big.bin", Run: "sub"}, strings.NewReader("sub's\n"))
	wantAPIError(t, "sub's stale PUT", err, http.StatusConflict, api.CodeStale, "data/big.bin changed since it was read. Read it again before you edit it.")
	out.Reset()
	if code, err := c.Exec(ctx, tenant, thread, api.ExecRequest{Command: "stat -c %a data/big.bin && cat data/big.bin"}, &out, &out); err != nil || code != 0 || out.String() != "600\nsmall\n" {
		t.Errorf("after the refused PUT the jail reads %q (exit %d, %v)", out.String(), code, err)
	}
	// A big stale PUT is refused as well, before its body is taken.
	_, err = c.Files().WriteRaw(ctx, tenant, thread, api.RawRequest{Path: "data/big.bin", Run: "sub"}, struct{ io.Reader }{newPattern(64 << 20)})
	wantAPIError(t, "sub's big stale PUT", err, http.StatusConflict, api.CodeStale, "changed since it was read")

	_, err = c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: "data/none.bin"}, io.Discard)
	wantAPIError(t, "GET of nothing", err, http.StatusNotFound, api.CodeNotFound, "data/none.bin: no such file.")
	_, err = c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: "data"}, io.Discard)
	wantAPIError(t, "GET of a folder", err, http.StatusBadRequest, api.CodeInvalid, "data is not a regular file.")
	_, err = c.Files().ReadRaw(ctx, tenant, thread, api.RawRequest{Path: "../../etc/passwd"}, io.Discard)
	wantAPIError(t, "GET out", err, http.StatusForbidden, api.CodeOutside, "../../etc/passwd is outside the workspace.")
	sock := env.g.SocketPath()
	for _, b := range []struct{ method, target, msg string }{
		{http.MethodPut, "/v1/tenants/acme/threads/raw/files/raw?path=x&mode=0888", `mode "0888" is not an octal permission mode`},
		{http.MethodPut, "/v1/tenants/acme/threads/raw/files/raw?path=x&mode=17777", "not an octal permission mode"},
		{http.MethodPut, "/v1/tenants/acme/threads/raw/files/raw?path=x&size=3", `unknown query parameter "size"`},
		{http.MethodGet, "/v1/tenants/acme/threads/raw/files/raw?path=x&mode=0644", `unknown query parameter "mode"`},
		{http.MethodGet, "/v1/tenants/acme/threads/raw/files/raw", "path is required"},
		{http.MethodPut, "/v1/tenants/acme/threads/raw/files/raw?path=a&path=b", "given 2 times"},
	} {
		resp := rawRequest(t, sock, b.method, b.target, []byte("body"))
		if e := resp.apiError(t); resp.status != http.StatusBadRequest || !strings.Contains(e.Message, b.msg) {
			t.Errorf("%s %s: %d %+v; want 400 with %q", b.method, b.target, resp.status, e, b.msg)
		}
	}
	resp2 := rawRequest(t, sock, http.MethodPost, "/v1/tenants/acme/threads/raw/files/raw?path=x", []byte("body"))
	if resp2.status != http.StatusMethodNotAllowed || resp2.header.Get("Allow") != "GET, PUT" {
		t.Errorf("POST raw: %d %v", resp2.status, resp2.header)
	}
}

// TestRawUploadTimeout: a raw upload may take longer than the body
// timeout as long as its bytes keep coming; one that stalls for the
// timeout is cut (408, connection closed), and the old file is whole.
func TestRawUploadTimeout(t *testing.T) {
	const timeout = time.Second
	env := startEnv(t, Config{BodyTimeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.c.Files().WriteRaw(ctx, "acme", "slow", api.RawRequest{Path: "f"}, strings.NewReader("old\n")); err != nil {
		t.Fatal(err)
	}
	sock := env.g.SocketPath()
	// put sends the headers of a PUT of size bytes, then what send
	// writes, and returns the answer.
	put := func(size int, send func(c net.Conn)) *http.Response {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "PUT /v1/tenants/acme/threads/slow/files/raw?path=f HTTP/1.1\r\nHost: warren\r\nContent-Length: %d\r\n\r\n", size)
		send(c)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}

	// Steady: 8 chunks, a pause of half the timeout after each: four
	// times the timeout in all.
	chunk := bytes.Repeat([]byte("s"), 64<<10)
	start := time.Now()
	resp := put(8*len(chunk), func(c net.Conn) {
		for range 8 {
			c.Write(chunk)
			time.Sleep(timeout / 2)
		}
	})
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("a steady upload over %v: %d %s", time.Since(start), resp.StatusCode, body)
	}
	t.Logf("a steady upload took %v with a body timeout of %v", time.Since(start).Round(time.Millisecond), timeout)

	if _, err := env.c.Files().WriteRaw(ctx, "acme", "slow", api.RawRequest{Path: "f"}, strings.NewReader("old\n")); err != nil {
		t.Fatal(err)
	}
	// Stalled: 1 MiB of 10, then nothing.
	start = time.Now()
	resp = put(10<<20, func(c net.Conn) { c.Write(bytes.Repeat([]byte("x"), 1<<20)) })
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Fatalf("a stalled upload: %d %v (close %v)", resp.StatusCode, resp.Header, resp.Close)
	}
	if waited := time.Since(start); waited > 10*timeout {
		t.Errorf("the stalled upload was cut after %v", waited)
	}
	var out bytes.Buffer
	if code, err := env.c.Exec(ctx, "acme", "slow", api.ExecRequest{Command: "cat f; ls -A | wc -l"}, &out, &out); err != nil || code != 0 || out.String() != "old\n1\n" {
		t.Errorf("after the stalled upload the jail reads %q (exit %d, %v)", out.String(), code, err)
	}
}

// TestRawQuota: on a btrfs with a thread quota, a PUT past it is 507
// quota with the seed's message, and the old file is whole.
func TestRawQuota(t *testing.T) {
	mnt := testenv.LoopFS(t, 512<<20, "mkfs.btrfs", []string{"-q"}, "")
	env := startEnv(t, Config{DataDir: filepath.Join(mnt, "data"), DiskQuotaBytes: 8 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.c
	if _, err := c.Files().WriteRaw(ctx, "acme", "q", api.RawRequest{Path: "f.bin"}, strings.NewReader("old\n")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Files().WriteRaw(ctx, "acme", "q", api.RawRequest{Path: "f.bin"}, bytes.NewReader(make([]byte, 32<<20)))
	wantAPIError(t, "PUT past the quota", err, http.StatusInsufficientStorage, api.CodeQuota, "The thread's disk quota is full: f.bin was not written.")
	var out bytes.Buffer
	if code, err := c.Exec(ctx, "acme", "q", api.ExecRequest{Command: "cat f.bin; ls -A | wc -l"}, &out, &out); err != nil || code != 0 || out.String() != "old\n1\n" {
		t.Errorf("after the refused PUT the jail reads %q (exit %d, %v)", out.String(), code, err)
	}
	// The JSON write says the same.
	_, err = c.Files().Write(ctx, "acme", "q", api.WriteFileRequest{Path: "g.txt", Content: strings.Repeat("x", 12<<20)})
	wantAPIError(t, "write past the quota", err, http.StatusInsufficientStorage, api.CodeQuota, "The thread's disk quota is full: g.txt was not written.")
}
