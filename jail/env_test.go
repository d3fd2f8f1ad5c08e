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
