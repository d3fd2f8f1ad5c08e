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
	// Home is HOME in every jail: the thread's own folder (Config.Home)
	// or a private tmpfs, outside the workspace, so that what tools keep
	// there (caches, histories, credentials helpers' files) never lands
	// among the thread's files.
	Home = "/home/agent"
	Tmp  = "/tmp"
	Path = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
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

// Env returns the whole environment of a command in a jail on the host's
// folders: EnvFor with no image.
func Env(thread, call map[string]string) ([]string, error) {
	return EnvFor(nil, thread, call)
}

// EnvFor returns the whole environment of a command: the image's
// variables (img may be nil), then the few variables a command needs
// (with values fit for the jail, never the server's), AGENT=1, the git
// settings above, and the extra variables configured for the thread and
// the call, each over the ones before (call over thread over warren's
// over the image's). Nothing else of the server's environment is ever
// passed on.
//
// Of warren's own, the image's PATH replaces the default PATH, and its
// locale stands when it sets one (LANG or LC_ALL: warren then sets
// neither, as its LC_ALL=C.UTF-8 would override the image's LANG; an
// image that sets none gets C.UTF-8, which musl has built in and glibc
// as files, as Debian's and Ubuntu's images have them); HOME,
// AGENT, TMPDIR, TEMP, TMP and the git settings are always warren's. An
// image variable whose name is not a plain name, whose value holds a NUL
// byte, or that is one of warren's own is skipped: an image is not the
// caller's to fix, and a command does not fail on it.
//
// An extra variable may not change AGENT or the git settings, and its
// name must be a plain name; such a variable is refused with ErrEnv.
func EnvFor(img *Image, thread, call map[string]string) ([]string, error) {
	env := map[string]string{}
	fixed := map[string]bool{"AGENT": true, "GIT_CONFIG_COUNT": true}
	for i, kv := range gitConfig {
		k, v := fmt.Sprintf("GIT_CONFIG_KEY_%d", i), fmt.Sprintf("GIT_CONFIG_VALUE_%d", i)
		env[k], env[v] = kv[0], kv[1]
		fixed[k], fixed[v] = true, true
	}
	env["GIT_CONFIG_COUNT"] = fmt.Sprint(len(gitConfig))
	// The variables the jail sets, and whether an image's value of each
	// stands.
	ours := []struct {
		name, value string
		image       bool
	}{
		{"PATH", Path, true},
		{"HOME", Home, false},
		{"TMPDIR", Tmp, false},
		{"TEMP", Tmp, false},
		{"TMP", Tmp, false},
		{"AGENT", "1", false},
	}
	locale := false
	if img != nil {
		for _, kv := range img.Env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || checkVar(k, v) != nil || fixed[k] || strings.HasPrefix(k, "GIT_CONFIG_") {
				continue
			}
			env[k] = v
			locale = locale || (k == "LANG" || k == "LC_ALL") && v != ""
		}
	}
	for _, o := range ours {
		if v := env[o.name]; v == "" || !o.image {
			env[o.name] = o.value
		}
	}
	if !locale {
		env["LANG"], env["LC_ALL"] = "C.UTF-8", "C.UTF-8"
	}
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
