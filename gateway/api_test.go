package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"warren/api"
	"warren/gateway/threads"
)

func TestRoutingHostileIDs(t *testing.T) {
	env := startEnv(t, Config{})
	tests := []struct {
		name         string
		target       string // the request line's path, exactly as sent
		tenant, want string // the ids the gateway must see
	}{
		{"dotdot raw", "/v1/tenants/acme/threads/../bind", "acme", ".."},
		{"dotdot escaped", "/v1/tenants/acme/threads/%2E%2E/bind", "acme", ".."},
		{"dot raw", "/v1/tenants/acme/threads/./bind", "acme", "."},
		{"slash escaped", "/v1/tenants/acme/threads/a%2Fb/bind", "acme", "a/b"},
		{"traversal", "/v1/tenants/acme/threads/..%2Fother-tenant%2Ft-1/bind", "acme", "../other-tenant/t-1"},
		{"backslash", "/v1/tenants/acme/threads/a%5Cb/bind", "acme", `a\b`},
		{"percent literal", "/v1/tenants/acme/threads/%252e%252e/bind", "acme", "%2e%2e"},
		{"nul", "/v1/tenants/acme/threads/a%00b/bind", "acme", "a\x00b"},
		{"cyrillic", "/v1/tenants/acme/threads/%D0%B0/bind", "acme", "\u0430"},
		{"latin", "/v1/tenants/acme/threads/a/bind", "acme", "a"},
		{"upper", "/v1/tenants/acme/threads/A/bind", "acme", "A"},
		{"tenant dotdot", "/v1/tenants/../threads/t/bind", "..", "t"},
		{"empty tenant is default", "/v1/tenants//threads/t/bind", api.DefaultTenant, "t"},
		{"space", "/v1/tenants/acme/threads/a%20b/bind", "acme", "a b"},
	}
	seen := make(map[string]string)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawRequest(t, env.g.SocketPath(), http.MethodPost, tt.target, nil)
			if resp.status != http.StatusOK {
				t.Fatalf("POST %s: got status %d (%s), want 200", tt.target, resp.status, resp.body)
			}
			var br api.BindResponse
			if err := json.Unmarshal(resp.body, &br); err != nil {
				t.Fatalf("decode %s: %v", resp.body, err)
			}
			if br.Binding.Tenant != tt.tenant || br.Binding.Thread != tt.want {
				t.Errorf("got ids (%q, %q), want (%q, %q)", br.Binding.Tenant, br.Binding.Thread, tt.tenant, tt.want)
			}
			wantMount, err := threads.WorkspaceRoot(env.g.mntBase, tt.tenant, tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if br.MountPath != wantMount || br.Binding.MountPath != wantMount {
				t.Errorf("got mount path %q, want %q", br.MountPath, wantMount)
			}
			if !isMounted(t, wantMount) {
				t.Errorf("%s is not mounted", wantMount)
			}
			id := tt.tenant + "\x00" + tt.want
			if prev, ok := seen[wantMount]; ok && prev != id {
				t.Errorf("same folder as the ids %q", prev)
			}
			seen[wantMount] = id

			// The client escapes the ids itself and must reach the same
			// thread.
			ti, err := env.c.Thread(context.Background(), tt.tenant, tt.want)
			if err != nil {
				t.Fatalf("client Thread: %v", err)
			}
			if ti.MountPath != wantMount || !ti.Mounted {
				t.Errorf("client Thread: got %q mounted=%v, want %q mounted", ti.MountPath, ti.Mounted, wantMount)
			}
		})
	}
}

func TestRoutingErrors(t *testing.T) {
	env := startEnv(t, Config{})
	mountDir := t.TempDir()
	longID := strings.Repeat("x", api.MaxIDBytes+1)
	tests := []struct {
		name       string
		method     string
		target     string
		body       []byte
		wantStatus int
		wantCode   string
		wantAllow  string
	}{
		{"unknown path", "GET", "/v1/nothing", nil, 404, api.CodeNotFound, ""},
		{"root", "GET", "/", nil, 404, api.CodeNotFound, ""},
		{"trailing slash", "GET", "/v1/threads/", nil, 404, api.CodeNotFound, ""},
		{"not cleaned", "GET", "/v1/x/../threads", nil, 404, api.CodeNotFound, ""},
		{"asterisk", "OPTIONS", "*", nil, 404, api.CodeNotFound, ""},
		{"wrong method on bind", "GET", "/v1/tenants/a/threads/t/bind", nil, 405, api.CodeMethodNotAllowed, "POST"},
		{"wrong method on thread", "PUT", "/v1/tenants/a/threads/t", nil, 405, api.CodeMethodNotAllowed, "DELETE, GET"},
		{"wrong method on mounts", "PATCH", "/v1/mounts", nil, 405, api.CodeMethodNotAllowed, "DELETE, GET, POST"},
		{"empty thread", "POST", "/v1/tenants/a/threads//bind", nil, 400, api.CodeInvalid, ""},
		{"long thread", "POST", "/v1/tenants/a/threads/" + longID + "/bind", nil, 400, api.CodeInvalid, ""},
		{"long tenant", "POST", "/v1/tenants/" + longID + "/threads/t/bind", nil, 400, api.CodeInvalid, ""},
		{"not utf-8", "POST", "/v1/tenants/a/threads/%FF/bind", nil, 400, api.CodeInvalid, ""},
		{"bind body not json", "POST", "/v1/tenants/a/threads/t/bind", []byte("{"), 400, api.CodeInvalid, ""},
		{"bind body unknown field", "POST", "/v1/tenants/a/threads/t/bind", []byte(`{"x":1}`), 400, api.CodeInvalid, ""},
		{"mount no body", "POST", "/v1/mounts", nil, 400, api.CodeInvalid, ""},
		{"mount malformed", "POST", "/v1/mounts", []byte(`{"thread":`), 400, api.CodeInvalid, ""},
		{"mount wrong type", "POST", "/v1/mounts", []byte(`{"thread":1}`), 400, api.CodeInvalid, ""},
		{"mount unknown field", "POST", "/v1/mounts", []byte(`{"thread":"t","path":"` + mountDir + `","rw":true}`), 400, api.CodeInvalid, ""},
		{"mount trailing data", "POST", "/v1/mounts", []byte(`{"thread":"t","path":"` + mountDir + `"} {}`), 400, api.CodeInvalid, ""},
		{"mount too large", "POST", "/v1/mounts", []byte(`{"thread":"` + strings.Repeat("x", 2<<20) + `"}`), 413, api.CodeTooLarge, ""},
		{"mount relative path", "POST", "/v1/mounts", []byte(`{"thread":"t","path":"rel"}`), 400, api.CodeInvalid, ""},
		{"unknown query", "GET", "/v1/threads?x=1", nil, 400, api.CodeInvalid, ""},
		{"repeated query", "GET", "/v1/threads?tenant=a&tenant=b", nil, 400, api.CodeInvalid, ""},
		{"bad query", "GET", "/v1/threads?tenant=%zz", nil, 400, api.CodeInvalid, ""},
		{"unmount without path", "DELETE", "/v1/mounts", nil, 400, api.CodeInvalid, ""},
		{"unmount unknown", "DELETE", "/v1/mounts?path=%2Fnowhere", nil, 404, api.CodeNotFound, ""},
		{"thread not bound", "GET", "/v1/tenants/a/threads/nobody", nil, 404, api.CodeNotFound, ""},
		{"close not bound", "POST", "/v1/tenants/a/threads/nobody/close", nil, 404, api.CodeNotFound, ""},
		{"delete not bound", "DELETE", "/v1/tenants/a/threads/nobody", nil, 404, api.CodeNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := rawRequest(t, env.g.SocketPath(), tt.method, tt.target, tt.body)
			if resp.status != tt.wantStatus {
				t.Fatalf("got status %d (%s), want %d", resp.status, resp.body, tt.wantStatus)
			}
			if got := resp.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", got)
			}
			if e := resp.apiError(t); e.Code != tt.wantCode || e.Message == "" {
				t.Errorf("got error %+v, want code %q and a message", e, tt.wantCode)
			}
			if got := resp.header.Get("Allow"); got != tt.wantAllow {
				t.Errorf("got Allow %q, want %q", got, tt.wantAllow)
			}
		})
	}
	// Nothing of those requests may have left a binding or a mount.
	tis, err := env.c.Threads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tis) != 0 {
		t.Errorf("got %d bindings after refused requests, want 0: %+v", len(tis), tis)
	}
	if live := env.live(t, mountDir); len(live) != 0 {
		t.Errorf("got %d mounts after refused requests, want 0: %v", len(live), live)
	}
	if !strings.Contains(env.logBuf.String(), "refused") {
		t.Errorf("refusals were not logged")
	}
}

// TestMalformedRequestLine: net/http refuses a request target it cannot
// parse before any handler runs, with a plain-text 400. The route table
// never sees it; the test pins that it is still refused.
func TestMalformedRequestLine(t *testing.T) {
	env := startEnv(t, Config{})
	resp := rawRequest(t, env.g.SocketPath(), "POST", "/v1/tenants/a/threads/%zz/bind", nil)
	if resp.status != http.StatusBadRequest {
		t.Errorf("got status %d, want 400", resp.status)
	}
	if live := env.live(t); len(live) != 0 {
		t.Errorf("got %d mounts, want 0: %v", len(live), live)
	}
}

func TestClientErrorsMatchSentinels(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	_, err := env.c.Thread(ctx, "a", "nobody")
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Thread of an unbound thread: got %v, want ErrNotFound", err)
	}
	var apiErr *api.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Errorf("got %#v, want an *APIError with status 404", err)
	}
	if _, err := env.c.Bind(ctx, "a", ""); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Bind with an empty thread: got %v, want ErrInvalid", err)
	}
	if err := env.c.Unmount(ctx, "/nowhere"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Unmount of nothing: got %v, want ErrNotFound", err)
	}
}

func TestListThreads(t *testing.T) {
	env := startEnv(t, Config{})
	ctx := context.Background()
	for _, k := range [][2]string{{"b", "t2"}, {"a", "t1"}, {"", "t0"}, {"b", "t1"}} {
		if _, err := env.c.Bind(ctx, k[0], k[1]); err != nil {
			t.Fatalf("Bind %v: %v", k, err)
		}
	}
	tests := []struct {
		name   string
		list   func() ([]api.ThreadInfo, error)
		wantID []string
	}{
		{"all", func() ([]api.ThreadInfo, error) { return env.c.Threads(ctx) }, []string{"a/t1", "b/t1", "b/t2", "default/t0"}},
		{"tenant b", func() ([]api.ThreadInfo, error) { return env.c.TenantThreads(ctx, "b") }, []string{"b/t1", "b/t2"}},
		{"default tenant", func() ([]api.ThreadInfo, error) { return env.c.TenantThreads(ctx, "") }, []string{"default/t0"}},
		{"unknown tenant", func() ([]api.ThreadInfo, error) { return env.c.TenantThreads(ctx, "zz") }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tis, err := tt.list()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ti := range tis {
				got = append(got, ti.Tenant+"/"+ti.Thread)
				if !ti.Mounted || ti.State != "bound" {
					t.Errorf("%s: got mounted=%v state=%q, want mounted and bound", ti.Thread, ti.Mounted, ti.State)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.wantID, ",") {
				t.Errorf("got %v, want %v", got, tt.wantID)
			}
		})
	}
}

func TestEmptyBindBodies(t *testing.T) {
	env := startEnv(t, Config{})
	for _, body := range [][]byte{nil, []byte("{}"), []byte(" {} \n")} {
		resp := rawRequest(t, env.g.SocketPath(), "POST", "/v1/tenants/a/threads/t/bind", body)
		if resp.status != 200 {
			t.Errorf("bind with body %q: got %d %s, want 200", body, resp.status, resp.body)
		}
	}
	if !bytes.Contains(rawRequest(t, env.g.SocketPath(), "GET", "/v1/threads", nil).body, []byte(`"thread":"t"`)) {
		t.Errorf("thread t not listed")
	}
}
