package gateway

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/jail"
	"warren/meta"
)

// TestJailPath: the jails' commands get Config.JailPath as their PATH,
// unless the thread's variables or the call's set one; its default is
// jail.Path, with /usr/local/go/bin after it where the host has that
// folder; one that is not absolute folders, ':'-separated, stops the
// start.
func TestJailPath(t *testing.T) {
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/usr/bin", true},
		{"/usr/local/bin:/usr/bin:/opt/tools/bin", true},
		{"", false},
		{"bin", false},
		{"/usr/bin::/bin", false},
		{"/usr/bin:", false},
		{":/usr/bin", false},
		{"/usr/bin:./bin", false},
		{"/usr/\x00bin", false},
	} {
		if err := CheckJailPath(c.path); (err == nil) != c.ok {
			t.Errorf("CheckJailPath(%q) = %v; want ok %v", c.path, err, c.ok)
		}
	}
	want := jail.Path
	if fi, err := os.Stat("/usr/local/go/bin"); err == nil && fi.IsDir() {
		want += ":/usr/local/go/bin"
	}
	if got := DefaultJailPath(); got != want {
		t.Errorf("DefaultJailPath() = %q; want %q", got, want)
	}
	if _, err := Start(context.Background(), Config{DataDir: filepath.Join(t.TempDir(), "data"), Store: newStore(t), JailPath: "/usr/bin:bin"}); err == nil || !strings.Contains(err.Error(), "not an absolute folder") {
		t.Errorf("a start with a relative folder in the jails' PATH: %v; want a refusal", err)
	}

	const path = "/usr/bin:/bin:/opt/tools/bin"
	env := startEnv(t, Config{JailPath: path})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, out := execIn(t, ctx, env, "t", "echo $PATH"); code != 0 || out != path+"\n" {
		t.Errorf("PATH in the jail: %q (exit %d); want %q", out, code, path)
	}
	if _, err := env.c.BindWith(ctx, "acme", "own", meta.Settings{Env: map[string]string{"PATH": "/usr/bin"}}); err != nil {
		t.Fatal(err)
	}
	if code, out := execIn(t, ctx, env, "own", "echo $PATH"); code != 0 || out != "/usr/bin\n" {
		t.Errorf("PATH of a thread that sets its own: %q (exit %d); want /usr/bin", out, code)
	}
	var out bytes.Buffer
	code, err := env.c.Exec(ctx, "acme", "t", api.ExecRequest{Command: "echo $PATH", Env: map[string]string{"PATH": "/bin"}}, &out, &out)
	if err != nil || code != 0 || out.String() != "/bin\n" {
		t.Errorf("PATH of a call that sets its own: %q (exit %d, %v); want /bin", out.String(), code, err)
	}
}
