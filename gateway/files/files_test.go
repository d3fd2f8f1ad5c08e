package files

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// The file API's promises, on a real hub over a temporary backing folder:
// no daemon, no mount.

const (
	tenant = "acme"
	thread = "t1"
)

// fakeThreads binds every thread to one backing folder.
type fakeThreads struct {
	root, mountPath string
}

func (t fakeThreads) Bind(_ context.Context, tenant, thread string) (api.ThreadInfo, error) {
	k, err := call.ThreadKey(tenant, thread)
	if err != nil {
		return api.ThreadInfo{}, err
	}
	return api.ThreadInfo{Binding: meta.Binding{ThreadKey: k, Root: t.root}}, nil
}

func (t fakeThreads) Paths(meta.ThreadKey) (root, mountPath string, err error) {
	return t.root, t.mountPath, nil
}

func (t fakeThreads) RootOf(b meta.Binding) (string, error) { return b.Root, nil }

// recorder is the events, the file events and the metrics.
type recorder struct {
	mu       sync.Mutex
	events   []api.Event
	changes  []fs.EntryChange
	refusals map[string]int
	wants    bool
}

func (r *recorder) Emit(ev api.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) Wants(meta.ThreadKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wants
}

func (r *recorder) Refused(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusals[kind]++
}

// OnStale is what package events' Bus does with a refused stale write:
// it counts it and tells it as a write.stale event.
func (r *recorder) OnStale(k meta.ThreadKey) func(fs.Stale) {
	return func(s fs.Stale) {
		r.Refused("stale")
		r.Emit(api.Event{Type: api.EventWriteStale, Tenant: k.Tenant, Thread: k.Thread, Actor: s.Actor.String(), Path: s.Path, Message: s.Message()})
	}
}

func (r *recorder) changesOf(k meta.ThreadKey) func(fs.EntryChange) {
	return func(c fs.EntryChange) {
		if k != (meta.ThreadKey{Tenant: tenant, Thread: thread}) {
			panic("changes of another thread")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.changes = append(r.changes, c)
	}
}

type env struct {
	fa   *Files
	h    *Handlers
	rec  *recorder
	root string // the backing folder
	mnt  string // the thread's mount path (never mounted here)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "ws")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	hub := fs.NewHub(fs.HubConfig{Logger: hclog.NewNullLogger()})
	t.Cleanup(hub.Close)
	rec := &recorder{refusals: map[string]int{}, wants: true}
	fa := New(Config{
		Threads: fakeThreads{root: root, mountPath: "/srv/mnt/acme/t1"},
		Hub:     hub, Events: rec, Changes: rec.changesOf, Logger: hclog.NewNullLogger(),
	})
	return &env{fa: fa, h: NewHandlers(fa), rec: rec, root: root, mnt: "/srv/mnt/acme/t1"}
}

func (e *env) write(t *testing.T, run, path, content string) (api.WriteFileResponse, error) {
	t.Helper()
	return e.fa.writeFile(t.Context(), tenant, thread, api.WriteFileRequest{Path: path, Run: run, Content: content})
}

func (e *env) read(t *testing.T, run, path string) api.ReadFileResponse {
	t.Helper()
	out, err := e.fa.readFile(t.Context(), tenant, thread, api.ReadFileRequest{Path: path, Run: run})
	if err != nil {
		t.Fatalf("read %s as %s: %v", path, run, err)
	}
	return out
}

// wantRefusal checks err's class, as the router answers it.
func wantRefusal(t *testing.T, what string, err error, sentinel error, code string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: %v, want %v", what, err, sentinel)
	}
	if _, got := call.Classify(err); got != code {
		t.Fatalf("%s: code %s, want %s (%v)", what, got, code, err)
	}
}

func (e *env) content(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A write based on a read older than the file's last change is refused,
// counted, told as a write.stale event, and leaves the file as it was;
// the same for a raw upload and an edit. A run ended forgets its reads.
func TestStaleWriteRefused(t *testing.T) {
	e := newEnv(t)
	if _, err := e.write(t, "b", "f.txt", "one\n"); err != nil {
		t.Fatal(err)
	}
	first := e.read(t, "a", "f.txt")
	w, err := e.write(t, "b", "f.txt", "two\n")
	if err != nil {
		t.Fatal(err)
	}
	if w.Version == first.Version {
		t.Fatalf("version %d after a write, as before it", w.Version)
	}

	_, err = e.write(t, "a", "f.txt", "three\n")
	wantRefusal(t, "stale write", err, api.ErrStale, api.CodeStale)
	_, err = e.fa.editFile(t.Context(), tenant, thread, api.EditFileRequest{Path: "f.txt", Run: "a", Old: "two", New: "four"})
	wantRefusal(t, "stale edit", err, api.ErrStale, api.CodeStale)
	r := httptest.NewRequest(http.MethodPut, "/x?path=f.txt&run=a", strings.NewReader("five\n"))
	_, err = e.h.WriteRaw(r, call.Params{Tenant: tenant, Thread: thread})
	wantRefusal(t, "stale raw upload", err, api.ErrStale, api.CodeStale)
	if got := e.content(t, "f.txt"); got != "two\n" {
		t.Fatalf("after refused writes the file holds %q, want %q", got, "two\n")
	}

	e.rec.mu.Lock()
	var stale []api.Event
	for _, ev := range e.rec.events {
		if ev.Type == api.EventWriteStale {
			stale = append(stale, ev)
		}
	}
	refused := e.rec.refusals["stale"]
	e.rec.mu.Unlock()
	if len(stale) == 0 || refused != len(stale) {
		t.Fatalf("%d write.stale events, %d stale refusals counted: want as many, at least one", len(stale), refused)
	}
	ev := stale[0]
	if ev.Tenant != tenant || ev.Thread != thread || ev.Path != "f.txt" || ev.Actor != fs.RunActor("a").String() || ev.Message == "" {
		t.Fatalf("write.stale event %+v", ev)
	}

	// After a fresh read the write goes.
	e.read(t, "a", "f.txt")
	if _, err := e.write(t, "a", "f.txt", "three\n"); err != nil {
		t.Fatalf("write after a fresh read: %v", err)
	}

	// A run ended is forgotten with its reads: its next write is not
	// judged by them.
	e.read(t, "a", "f.txt")
	if _, err := e.write(t, "b", "f.txt", "six\n"); err == nil {
		t.Fatal("b wrote over a's write without reading it")
	}
	e.read(t, "b", "f.txt")
	if _, err := e.write(t, "b", "f.txt", "six\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fa.endRun(t.Context(), tenant, thread, api.RunRequest{Run: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.write(t, "a", "f.txt", "seven\n"); err != nil {
		t.Fatalf("write of an ended run, as new: %v", err)
	}
	if got := e.content(t, "f.txt"); got != "seven\n" {
		t.Fatalf("the file holds %q", got)
	}
}

// A path out of the workspace is refused as outside, whether absolute
// or through a link; an absolute path under the thread's mount path is
// the workspace's.
func TestOutsideRefused(t *testing.T) {
	e := newEnv(t)
	out := t.TempDir()
	if err := os.Symlink(out, filepath.Join(e.root, "away")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(out, "f"), "away/f", "../f", e.mnt + "/../f", e.mnt + "x/f"} {
		_, err := e.write(t, "a", p, "x")
		wantRefusal(t, "write "+p, err, api.ErrOutside, api.CodeOutside)
		_, err = e.fa.makeFolder(t.Context(), tenant, thread, api.MkdirRequest{Path: p, Run: "a"})
		wantRefusal(t, "mkdir "+p, err, api.ErrOutside, api.CodeOutside)
		q := url.Values{"path": {p}, "run": {"a"}}
		r := httptest.NewRequest(http.MethodPut, "/x?"+q.Encode(), strings.NewReader("x"))
		_, err = e.h.WriteRaw(r, call.Params{Tenant: tenant, Thread: thread})
		wantRefusal(t, "raw upload "+p, err, api.ErrOutside, api.CodeOutside)
	}
	if es, err := os.ReadDir(out); err != nil || len(es) != 0 {
		t.Fatalf("outside folder holds %v (%v)", es, err)
	}
	if es, err := os.ReadDir(filepath.Dir(e.root)); err != nil || len(es) != 1 {
		t.Fatalf("the backing folder's parent holds %v (%v)", es, err)
	}

	// The mount path names the workspace.
	w, err := e.write(t, "a", e.mnt+"/sub/f.txt", "in\n")
	if err != nil {
		t.Fatal(err)
	}
	if w.Path != e.mnt+"/sub/f.txt" {
		t.Fatalf("answered path %q", w.Path)
	}
	if got := e.content(t, "sub/f.txt"); got != "in\n" {
		t.Fatalf("sub/f.txt holds %q", got)
	}
	// And every change the file API makes is told while someone wants
	// it.
	e.rec.mu.Lock()
	changes := e.rec.changes
	e.rec.mu.Unlock()
	var paths []string
	for _, c := range changes {
		paths = append(paths, c.Path)
	}
	if len(changes) == 0 || changes[len(changes)-1].Path != "/sub/f.txt" {
		t.Fatalf("changes told: %v", paths)
	}
}

// A file read, written or edited whole is bounded by fs.MaxFileBytes (and
// its body by MaxFileBody); raw content is not: an upload over the bound
// goes in whole and comes out whole.
func TestSizeBounds(t *testing.T) {
	e := newEnv(t)
	if n := len(`{"path":"","run":"","content":"","encoding":"base64"}`) + base64.StdEncoding.EncodedLen(fs.MaxFileBytes); n > MaxFileBody {
		t.Fatalf("a write of the largest file takes %d bytes, MaxFileBody is %d", n, MaxFileBody)
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), fs.MaxFileBytes/16+1)
	_, err := e.write(t, "a", "big.txt", string(big))
	wantRefusal(t, "write over the bound", err, api.ErrTooLarge, api.CodeTooLarge)
	if _, err := os.Stat(filepath.Join(e.root, "big.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused write left big.txt: %v", err)
	}

	r := httptest.NewRequest(http.MethodPut, "/x?path=big.txt&run=a&mode=0600", bytes.NewReader(big))
	resp, err := e.h.WriteRaw(r, call.Params{Tenant: tenant, Thread: thread})
	if err != nil {
		t.Fatalf("raw upload of %d bytes: %v", len(big), err)
	}
	info := resp.(api.RawInfo)
	if info.Size != int64(len(big)) || info.Path != "big.txt" || info.Version == 0 {
		t.Fatalf("raw upload answered %+v", info)
	}
	st, err := os.Stat(filepath.Join(e.root, "big.txt"))
	if err != nil || st.Size() != int64(len(big)) || st.Mode().Perm() != 0o600 {
		t.Fatalf("big.txt after the upload: %v %v", st, err)
	}

	_, err = e.fa.readFile(t.Context(), tenant, thread, api.ReadFileRequest{Path: "big.txt", Run: "a"})
	wantRefusal(t, "read over the bound", err, api.ErrTooLarge, api.CodeTooLarge)

	r = httptest.NewRequest(http.MethodGet, "/x?path=big.txt&run=a", nil)
	s, err := e.h.ReadRaw(r, call.Params{Tenant: tenant, Thread: thread})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.(call.Streamer).ServeStream(w, r)
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), big) {
		t.Fatalf("raw read: status %d, %d bytes, want %d", w.Code, w.Body.Len(), len(big))
	}
	if got := w.Header().Get("Content-Length"); got != strconv.Itoa(len(big)) {
		t.Fatalf("Content-Length %s", got)
	}
	if got := w.Header().Get(api.VersionHeader); got != strconv.FormatUint(info.Version, 10) {
		t.Fatalf("version header %s, the upload answered %d", got, info.Version)
	}
	// A raw read is a read, recorded once every byte went out: c's
	// upload after a's next one is stale until c reads again.
	upload := func(run string) error {
		r := httptest.NewRequest(http.MethodPut, "/x?path=big.txt&run="+run, bytes.NewReader(big))
		_, err := e.h.WriteRaw(r, call.Params{Tenant: tenant, Thread: thread})
		return err
	}
	readRaw := func(run string) {
		r := httptest.NewRequest(http.MethodGet, "/x?path=big.txt&run="+run, nil)
		s, err := e.h.ReadRaw(r, call.Params{Tenant: tenant, Thread: thread})
		if err != nil {
			t.Fatal(err)
		}
		s.(call.Streamer).ServeStream(httptest.NewRecorder(), r)
	}
	readRaw("c")
	if err := upload("a"); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, "upload over a newer version", upload("c"), api.ErrStale, api.CodeStale)
	readRaw("c")
	if err := upload("c"); err != nil {
		t.Fatalf("upload after a raw read: %v", err)
	}
}

// A raw upload whose body is cut leaves nothing, and says the request is
// at fault.
func TestRawUploadCut(t *testing.T) {
	e := newEnv(t)
	body := io.MultiReader(strings.NewReader("some bytes"), errReader{io.ErrUnexpectedEOF})
	r := httptest.NewRequest(http.MethodPut, "/x?path=cut.bin&run=a", body)
	_, err := e.h.WriteRaw(r, call.Params{Tenant: tenant, Thread: thread})
	wantRefusal(t, "cut upload", err, api.ErrInvalid, api.CodeInvalid)
	if es, err := os.ReadDir(e.root); err != nil || len(es) != 0 {
		t.Fatalf("a cut upload left %v (%v)", es, err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestInWorkspace(t *testing.T) {
	for _, c := range []struct{ p, want string }{
		{"a/b", "a/b"},
		{"/m/t", ""},
		{"/m/t/", ""},
		{"/m/t/a/b", "a/b"},
		{"/m/tx/a", "/m/tx/a"},
		{"/etc/passwd", "/etc/passwd"},
		{"m/t/a", "m/t/a"},
	} {
		if got := inWorkspace(c.p, "/m/t"); got != c.want {
			t.Errorf("inWorkspace(%q) = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestValidRun(t *testing.T) {
	for _, run := range []string{"r", "run-1", strings.Repeat("x", 256), "été"} {
		if err := ValidRun(run); err != nil {
			t.Errorf("ValidRun(%q): %v", run, err)
		}
	}
	for _, run := range []string{strings.Repeat("x", 257), "a\nb", "a\rb", "a\x00b", "\xff"} {
		if err := ValidRun(run); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ValidRun(%q): %v, want invalid", run, err)
		}
	}
}

func TestRawQuery(t *testing.T) {
	q := func(s string, withMode bool) (api.RawRequest, error) {
		return RawQuery(httptest.NewRequest(http.MethodGet, "/x?"+s, nil), withMode)
	}
	req, err := q("path=a%2Fb&run=r&mode=0640", true)
	if err != nil || req.Path != "a/b" || req.Run != "r" || req.Mode == nil || *req.Mode != 0o640 {
		t.Fatalf("RawQuery: %+v %v", req, err)
	}
	if req, err := q("path=a", true); err != nil || req.Mode != nil {
		t.Fatalf("RawQuery without mode: %+v %v", req, err)
	}
	for _, c := range []struct {
		q        string
		withMode bool
	}{
		{"run=r", false},               // no path
		{"path=a&mode=0644", false},    // no mode on a read
		{"path=a&mode=9", true},        // not octal
		{"path=a&mode=17777", true},    // not a permission mode
		{"path=a&x=1", false},          // unknown
		{"path=a%00b", false},          // NUL
		{"path=a&path=b&run=r", false}, // twice
		{"path=" + strings.Repeat("a", call.MaxNameBytes+1), false},
	} {
		if _, err := q(c.q, c.withMode); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("RawQuery(%s, %v): %v, want invalid", c.q, c.withMode, err)
		}
	}
}
