package jail

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestEnvHoldsOnlyTheAllowedSet(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	t.Setenv("DATABASE_URL", "postgres://server")
	env, err := Env(map[string]string{"NPM_TOKEN": "npm_ro"}, map[string]string{"DEBUG": "1", "NPM_TOKEN": "call"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{
		"PATH": Path, "HOME": Home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
		"TMPDIR": Tmp, "TEMP": Tmp, "TMP": Tmp, "AGENT": "1",
		"GIT_CONFIG_COUNT": "2",
		"GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null",
		"GIT_CONFIG_KEY_1": "core.fsmonitor", "GIT_CONFIG_VALUE_1": "false",
		"NPM_TOKEN": "call", // the call's value wins over the thread's
		"DEBUG":     "1",
	}
	if len(got) != len(want) {
		t.Errorf("got %d variables, want %d: %v", len(got), len(want), env)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := want[k]; !ok {
			if _, leaked := got[k]; leaked {
				t.Errorf("server variable %s leaked into the command's env", k)
			}
		}
	}
}

func TestEnvRefusesBadExtras(t *testing.T) {
	for _, c := range []struct {
		name string
		vars map[string]string
	}{
		{"agent", map[string]string{"AGENT": "0"}},
		{"git count", map[string]string{"GIT_CONFIG_COUNT": "0"}},
		{"git key", map[string]string{"GIT_CONFIG_KEY_5": "core.hooksPath"}},
		{"empty name", map[string]string{"": "x"}},
		{"equals", map[string]string{"A=B": "x"}},
		{"digit first", map[string]string{"1A": "x"}},
		{"nul value", map[string]string{"A": "x\x00y"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Env(nil, c.vars)
			if !errors.Is(err, ErrEnv) {
				t.Errorf("got %v, want ErrEnv", err)
			}
		})
	}
}

// TestEnvForImage: an image's variables join below warren's: its PATH
// and its locale stand, HOME, AGENT, the temporary folders and the git
// settings stay warren's, the thread's and the call's extras go over all,
// and the image's variables that could not be set are skipped.
func TestEnvForImage(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	img := &Image{Env: []string{
		"PATH=/usr/local/node/bin:/usr/bin:/bin", "NODE_VERSION=22.1.0", "YARN_VERSION=1.22.19",
		"HOME=/root", "AGENT=0", "TMPDIR=/var/tmp", "GIT_CONFIG_COUNT=0", "GIT_CONFIG_KEY_0=core.pager",
		"BAD NAME=x", "1ST=x", "NUL=a\x00b", "NOEQUALS", "=empty", "DEBUG=image",
	}}
	env, err := EnvFor(img, map[string]string{"NPM_TOKEN": "npm_ro"}, map[string]string{"DEBUG": "call"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	want := map[string]string{
		"PATH": "/usr/local/node/bin:/usr/bin:/bin", "NODE_VERSION": "22.1.0", "YARN_VERSION": "1.22.19",
		"HOME": Home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
		"TMPDIR": Tmp, "TEMP": Tmp, "TMP": Tmp, "AGENT": "1",
		"GIT_CONFIG_COUNT": "2",
		"GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null",
		"GIT_CONFIG_KEY_1": "core.fsmonitor", "GIT_CONFIG_VALUE_1": "false",
		"NPM_TOKEN": "npm_ro",
		"DEBUG":     "call", // the call's over the image's
	}
	if len(got) != len(want) {
		t.Errorf("got %d variables, want %d: %v", len(got), len(want), env)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}

	for _, c := range []struct {
		name  string
		image []string
		want  map[string]string // "" means unset
	}{
		{"no locale", nil, map[string]string{"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PATH": Path}},
		{"its LANG", []string{"LANG=en_US.UTF-8"}, map[string]string{"LANG": "en_US.UTF-8", "LC_ALL": ""}},
		{"its LC_ALL", []string{"LC_ALL=C"}, map[string]string{"LANG": "", "LC_ALL": "C"}},
		{"an empty PATH", []string{"PATH="}, map[string]string{"PATH": Path}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, err := EnvFor(&Image{Env: c.image}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestEnvIsEnvForNoImage: Env is EnvFor without an image.
func TestEnvIsEnvForNoImage(t *testing.T) {
	a, errA := Env(map[string]string{"A": "1"}, nil)
	b, errB := EnvFor(nil, map[string]string{"A": "1"}, nil)
	if errA != nil || errB != nil || strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("Env: %v, %v; EnvFor(nil): %v, %v", a, errA, b, errB)
	}
	if _, err := EnvFor(&Image{}, nil, map[string]string{"AGENT": "0"}); !errors.Is(err, ErrEnv) {
		t.Errorf("an extra AGENT on an image: %v, want ErrEnv", err)
	}
}
