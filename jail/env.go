package jail

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Paths inside the jail that the environment points at.
const (
	Workspace = "/workspace"
	Home      = "/workspace"
	Tmp       = "/tmp"
	Path      = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
)

// gitConfig turns off what a project's git configuration could run behind
// an agent's back: hooks (a committed core.hooksPath, or .git/hooks) and
// the filesystem monitor (core.fsmonitor names a program to run). Set via
// GIT_CONFIG_COUNT, it outranks every configuration file.
var gitConfig = [][2]string{
	{"core.hooksPath", "/dev/null"},
	{"core.fsmonitor", "false"},
}

// ErrEnv marks an extra variable that may not be set.
var ErrEnv = errors.New("jail: variable not allowed")

// Env returns the whole environment of a command: the few variables a
// command needs (with values fit for the jail, never the server's), AGENT=1,
// the git settings above, and the extra variables configured for the
// thread and the call, in that order of precedence (call over thread).
// Nothing else of the server's environment is ever passed on.
//
// An extra variable may not change AGENT or the git settings, and its
// name must be a plain name; such a variable is refused with ErrEnv.
func Env(thread, call map[string]string) ([]string, error) {
	env := map[string]string{
		"PATH":   Path,
		"HOME":   Home,
		"LANG":   "C.UTF-8",
		"LC_ALL": "C.UTF-8",
		"TMPDIR": Tmp,
		"TEMP":   Tmp,
		"TMP":    Tmp,
		"AGENT":  "1",
	}
	fixed := map[string]bool{"AGENT": true, "GIT_CONFIG_COUNT": true}
	for i, kv := range gitConfig {
		k, v := fmt.Sprintf("GIT_CONFIG_KEY_%d", i), fmt.Sprintf("GIT_CONFIG_VALUE_%d", i)
		env[k], env[v] = kv[0], kv[1]
		fixed[k], fixed[v] = true, true
	}
	env["GIT_CONFIG_COUNT"] = fmt.Sprint(len(gitConfig))
	for _, extra := range []map[string]string{thread, call} {
		for k, v := range extra {
			if err := checkVar(k, v); err != nil {
				return nil, err
			}
			if fixed[k] || strings.HasPrefix(k, "GIT_CONFIG_") {
				return nil, fmt.Errorf("%w: %s is set by warren", ErrEnv, k)
			}
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func checkVar(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty name", ErrEnv)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		ok := c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return fmt.Errorf("%w: %q is not a plain variable name", ErrEnv, k)
		}
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("%w: the value of %s holds a NUL byte", ErrEnv, k)
	}
	return nil
}
