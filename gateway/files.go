package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	iofs "io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// The file API: read, write and edit a file of a thread's workspace on
// behalf of an agent run, for a harness that serves many runs from one
// process. The work is done by the fs core on the backing folder, through
// the same locks, versions and read records as the thread's mounts (never
// through the gateway's own mount: a process must not use a mount it
// serves). Registering a process for a run makes its requests on the
// mount count as that run's too.

// maxFileBody bounds the body of a file write: the largest file the API
// writes, base64-encoded, plus room for the rest of the request.
const maxFileBody = fs.MaxFileBytes*4/3 + 64<<10

// fileError turns an error of the fs core into the API's: a refusal
// whose message is meant for the agent as it is. Errors it does not know
// are returned as they are.
func fileError(err error) error {
	var (
		stale     *fs.StaleError
		none      *fs.NoMatchError
		many      *fs.ManyMatchesError
		outside   *fs.OutsideError
		linkOut   *fs.LinkOutError
		tooLarge  *fs.TooLargeError
		notFile   *fs.NotFileError
		notFolder *fs.NotFolderError
		exists    *fs.ExistsError
		notEmpty  *fs.NotEmptyError
		root      *fs.RootError
		space     *fs.SpaceError
		content   *fs.ContentError
	)
	switch {
	case errors.As(err, &stale):
		return call.Refuse(api.ErrStale, err.Error())
	case errors.As(err, &none), errors.As(err, &many):
		return call.Refuse(api.ErrNoMatch, err.Error())
	case errors.As(err, &outside), errors.As(err, &linkOut):
		return call.Refuse(api.ErrOutside, err.Error())
	case errors.As(err, &tooLarge):
		return call.Refuse(api.ErrTooLarge, err.Error())
	case errors.As(err, &notFile), errors.As(err, &notFolder):
		return call.Refuse(api.ErrInvalid, err.Error())
	case errors.As(err, &exists), errors.As(err, &notEmpty):
		return call.Refuse(api.ErrConflict, err.Error())
	case errors.As(err, &root):
		return call.Refuse(api.ErrForbidden, err.Error())
	case errors.As(err, &space) && errors.Is(err, syscall.EDQUOT):
		return call.Refuse(api.ErrQuota, fmt.Sprintf("The thread's disk quota is full: %s was not written.", space.Path))
	case errors.As(err, &space):
		return call.Refuse(api.ErrNoSpace, fmt.Sprintf("The disk is full: %s was not written.", space.Path))
	case errors.As(err, &content) && errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the request body stopped arriving: %s was not written", call.ErrBodyTimeout, content.Path)
	case errors.As(err, &content):
		return fmt.Errorf("%w: the request body was cut: %s was not written: %v", api.ErrInvalid, content.Path, content.Err)
	case errors.Is(err, syscall.ELOOP):
		return call.Refuse(api.ErrInvalid, strings.TrimSuffix(err.Error(), ": "+syscall.ELOOP.Error())+": too many links in a chain (a loop?).")
	case errors.Is(err, iofs.ErrNotExist):
		msg := err.Error()
		for _, cause := range []string{iofs.ErrNotExist.Error(), syscall.ENOENT.Error()} {
			msg = strings.TrimSuffix(msg, ": "+cause)
		}
		return call.Refuse(api.ErrNotFound, msg+": no such file.")
	}
	return err
}

// withFiles binds the thread if need be and runs fn on its workspace.
func (g *Gateway) withFiles(ctx context.Context, tenant, thread string, fn func(k meta.ThreadKey, f *fs.Files, mountPath string) error) error {
	k, f, mountPath, err := g.openFiles(ctx, tenant, thread)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(k, f, mountPath)
}

// openFiles binds the thread if need be and opens its workspace for the
// file API. Close f when done.
func (g *Gateway) openFiles(ctx context.Context, tenant, thread string) (k meta.ThreadKey, f *fs.Files, mountPath string, err error) {
	info, err := g.bind(ctx, tenant, thread)
	if err != nil {
		return k, nil, "", err
	}
	k = meta.ThreadKey{Tenant: info.Tenant, Thread: info.Thread}
	_, mountPath, err = g.threadPaths(k)
	if err != nil {
		return k, nil, "", err
	}
	root, err := g.rootOf(info.Binding)
	if err != nil {
		return k, nil, "", err
	}
	f, err = g.hub.Files(root, k.Tenant+"/"+k.Thread, g.events.OnStale(k))
	if err != nil {
		return k, nil, "", err
	}
	f.WatchChanges(g.events.OnChange(k), func() bool { return g.events.Wants(k) })
	return k, f, mountPath, nil
}

// actorFor is the actor a file request acts as: its run, or else the
// process at the other end of the socket.
func (g *Gateway) actorFor(ctx context.Context, run string) (fs.Actor, error) {
	if run != "" {
		if err := validRun(run); err != nil {
			return fs.Actor{}, err
		}
		return fs.RunActor(run), nil
	}
	p := call.PeerFrom(ctx)
	if p.Err != nil || p.PID <= 0 {
		return fs.Actor{}, fmt.Errorf("%w: no run given and the calling process is unknown", api.ErrInvalid)
	}
	return g.hub.ActorOfPid(int(p.PID)), nil
}

// validRun refuses run ids that could not be told apart in logs.
func validRun(run string) error {
	if len(run) > 256 || !utf8.ValidString(run) || strings.ContainsAny(run, "\x00\n\r") {
		return fmt.Errorf("%w: run ids are up to 256 bytes of UTF-8 without NUL or line breaks", api.ErrInvalid)
	}
	return nil
}

// inWorkspace turns a path as an agent gives it (relative to the
// workspace, or absolute under the thread's mount path) into one relative
// to the workspace. Any other absolute path is left as it is, to be
// refused by the core as outside.
func inWorkspace(p, mountPath string) string {
	if rest, ok := strings.CutPrefix(p, mountPath); ok && filepath.IsAbs(p) && (rest == "" || rest[0] == '/') {
		return strings.TrimPrefix(rest, "/")
	}
	return p
}

// readFile reads a file of the thread's workspace for run.
func (g *Gateway) readFile(ctx context.Context, tenant, thread string, req api.ReadFileRequest) (api.ReadFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.ReadFileResponse{}, err
	}
	a, err := g.actorFor(ctx, req.Run)
	if err != nil {
		return api.ReadFileResponse{}, err
	}
	var out api.ReadFileResponse
	err = g.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		data, v, err := f.Read(ctx, a, inWorkspace(req.Path, mountPath))
		if err != nil {
			return fileError(err)
		}
		out = api.ReadFileResponse{Path: req.Path, Size: len(data), Version: v}
		if utf8.Valid(data) {
			out.Content = string(data)
		} else {
			out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
		}
		return nil
	})
	return out, err
}

// writeFile writes a file of the thread's workspace for run.
func (g *Gateway) writeFile(ctx context.Context, tenant, thread string, req api.WriteFileRequest) (api.WriteFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.WriteFileResponse{}, err
	}
	a, err := g.actorFor(ctx, req.Run)
	if err != nil {
		return api.WriteFileResponse{}, err
	}
	data := []byte(req.Content)
	switch req.Encoding {
	case "":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(req.Content); err != nil {
			return api.WriteFileResponse{}, fmt.Errorf("%w: content is not base64: %v", api.ErrInvalid, err)
		}
	default:
		return api.WriteFileResponse{}, fmt.Errorf("%w: encoding is \"\" or \"base64\", not %s", api.ErrInvalid, call.Quote(req.Encoding))
	}
	var out api.WriteFileResponse
	err = g.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		v, err := f.Write(ctx, a, inWorkspace(req.Path, mountPath), data)
		if err != nil {
			return fileError(err)
		}
		out = api.WriteFileResponse{Path: req.Path, Size: len(data), Version: v}
		return nil
	})
	return out, err
}

// editFile edits a file of the thread's workspace for run.
func (g *Gateway) editFile(ctx context.Context, tenant, thread string, req api.EditFileRequest) (api.EditFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.EditFileResponse{}, err
	}
	a, err := g.actorFor(ctx, req.Run)
	if err != nil {
		return api.EditFileResponse{}, err
	}
	var out api.EditFileResponse
	err = g.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		v, n, err := f.Edit(ctx, a, inWorkspace(req.Path, mountPath), req.Old, req.New, req.All)
		if err != nil {
			if e := fileError(err); e != err {
				return e
			}
			// A system call's failure (a full disk) is not the
			// request's fault.
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return err
			}
			return fmt.Errorf("%w: %s", api.ErrInvalid, err)
		}
		out = api.EditFileResponse{Path: req.Path, Replaced: n, Version: v}
		return nil
	})
	return out, err
}

// registerRun makes process pid and its descendants act as run in the
// thread's workspace (and every other this gateway serves).
func (g *Gateway) registerRun(ctx context.Context, tenant, thread string, req api.RunRequest) (api.RunResponse, error) {
	if req.Run == "" || req.Pid == 0 {
		return api.RunResponse{}, fmt.Errorf("%w: a run and a pid are required", api.ErrInvalid)
	}
	if err := validRun(req.Run); err != nil {
		return api.RunResponse{}, err
	}
	if err := call.CheckRunPid(req.Pid); err != nil {
		return api.RunResponse{}, err
	}
	if _, err := g.bind(ctx, tenant, thread); err != nil {
		return api.RunResponse{}, err
	}
	if err := g.hub.RegisterRun(req.Pid, req.Run); err != nil {
		return api.RunResponse{}, fmt.Errorf("%w: register process %d: %v", api.ErrNotFound, req.Pid, err)
	}
	g.log.Info("run registered", "tenant", tenant, "thread", thread, "run", req.Run, "pid", req.Pid)
	return api.RunResponse{Run: req.Run, Pid: req.Pid}, nil
}

// endRun forgets run: its registered processes and its read records.
func (g *Gateway) endRun(ctx context.Context, tenant, thread string, req api.RunRequest) (api.RunResponse, error) {
	if req.Run == "" {
		return api.RunResponse{}, fmt.Errorf("%w: a run is required", api.ErrInvalid)
	}
	if err := validRun(req.Run); err != nil {
		return api.RunResponse{}, err
	}
	if _, err := call.ThreadKey(tenant, thread); err != nil {
		return api.RunResponse{}, err
	}
	g.hub.EndRun(req.Run)
	return api.RunResponse{Run: req.Run}, nil
}

func (g *Gateway) handleReadFile(r *http.Request, p call.Params) (any, error) {
	var req api.ReadFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.readFile(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleWriteFile(r *http.Request, p call.Params) (any, error) {
	var req api.WriteFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.writeFile(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleEditFile(r *http.Request, p call.Params) (any, error) {
	var req api.EditFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.editFile(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleRegisterRun(r *http.Request, p call.Params) (any, error) {
	var req api.RunRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.registerRun(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleEndRun(r *http.Request, p call.Params) (any, error) {
	var req api.RunRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.endRun(r.Context(), p.Tenant, p.Thread, req)
}
