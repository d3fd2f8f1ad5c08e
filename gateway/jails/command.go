package jails

import (
	"context"
	"fmt"
	"path"
	"strings"

	"warren/api"
	"warren/gateway/call"
	"warren/jail"
	"warren/meta"
)

// CommandIn checks a command line of a request (exec or spawn) before
// anything runs, then finds the thread's jail (binding the thread and
// starting the jail if need be) and returns the command to run there,
// with its whole environment (the thread's variables, then the call's)
// and its folder. The jail is held: the caller calls release once its
// command is registered (StartExec) or its job holds its slot, or when it
// gives up; release is nil with an error.
func (js *Jails) CommandIn(ctx context.Context, tenant, thread, command, run, cwd string, callEnv map[string]string) (j *jail.Jail, settings meta.Settings, k meta.ThreadKey, cmd jail.Cmd, release func(), err error) {
	if command == "" {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, fmt.Errorf("%w: command is required", api.ErrInvalid)
	}
	if err := call.CheckText("command", command, call.MaxCommandBytes); err != nil {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, err
	}
	if err := call.CheckPath("cwd", cwd); err != nil {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, err
	}
	if err := call.CheckEnvSize("env", callEnv); err != nil {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, err
	}
	if run != "" {
		if err := js.cfg.CheckRun(run); err != nil {
			return nil, meta.Settings{}, k, jail.Cmd{}, nil, err
		}
	}
	dir, err := execCwd(cwd)
	if err != nil {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, err
	}
	if _, err := jail.Env(nil, callEnv); err != nil {
		return nil, meta.Settings{}, k, jail.Cmd{}, nil, fmt.Errorf("%w: %v", api.ErrInvalid, err)
	}
	j, settings, k, release, err = js.thread(ctx, tenant, thread)
	if err != nil {
		return nil, settings, k, jail.Cmd{}, nil, err
	}
	env, err := js.Env(j.Image(), settings, callEnv)
	if err != nil {
		release()
		return nil, settings, k, jail.Cmd{}, nil, fmt.Errorf("%w: %v", api.ErrInvalid, err)
	}
	return j, settings, k, jail.Cmd{Run: run, Script: command, Env: env, Dir: dir}, release, nil
}

// ExecTerm returns the TERM of a terminal command: the request's, or
// api.DefaultTerm; a Term without Tty, or one that is no terminal type's
// name, is refused.
func ExecTerm(req api.ExecRequest) (string, error) {
	if req.Term == "" {
		return api.DefaultTerm, nil
	}
	if !req.Tty {
		return "", fmt.Errorf("%w: term %s without tty: only a command on a terminal has a TERM", api.ErrInvalid, call.Quote(req.Term))
	}
	ok := len(req.Term) <= 64
	for _, c := range req.Term {
		ok = ok && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(".+-_", c))
	}
	if !ok {
		return "", fmt.Errorf("%w: term %s is not a terminal type (letters, digits and .+-_, at most 64)", api.ErrInvalid, call.Quote(req.Term))
	}
	return req.Term, nil
}

// WithTerm adds TERM=term to env, unless the thread's or the call's
// variables set TERM themselves: a terminal command is the one place the
// env gains TERM.
func WithTerm(env []string, term string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "TERM=") {
			return env
		}
	}
	return append(env, "TERM="+term)
}

// execCwd turns a request's cwd into a folder inside the jail's
// workspace, or refuses it.
func execCwd(cwd string) (string, error) {
	if cwd == "" {
		// The jail's own start folder: the workspace, or the image's
		// WorkingDir inside it (jail.Image.WorkDir).
		return "", nil
	}
	p := cwd
	if !path.IsAbs(p) {
		p = path.Join(jail.Workspace, p)
	}
	p = path.Clean(p)
	if p != jail.Workspace && !strings.HasPrefix(p, jail.Workspace+"/") {
		return "", call.Refuse(api.ErrOutside, fmt.Sprintf("cwd %s is outside the workspace.", call.Quote(cwd)))
	}
	return p, nil
}
