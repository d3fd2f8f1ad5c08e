package files

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// MaxFileBody bounds the body of a file read, write or edit: the largest
// file the API writes, base64-encoded, plus room for the rest of the
// request. The router gives those routes this bound (a raw upload has
// none: the thread's disk quota is its bound).
const MaxFileBody = fs.MaxFileBytes*4/3 + 64<<10

// Threads is what the file API calls of the threads: a thread's binding
// (made if need be) and where its workspace is.
type Threads interface {
	Bind(ctx context.Context, tenant, thread string) (api.ThreadInfo, error)
	Paths(k meta.ThreadKey) (root, mountPath string, err error)
	RootOf(b meta.Binding) (string, error)
}

// Events is where the file API's refusals go (package events): OnStale
// is the callback that counts a refused stale write and tells it as a
// write.stale event; Wants says whether anyone reads a thread's events
// (its file events are made only then).
type Events interface {
	OnStale(k meta.ThreadKey) func(fs.Stale)
	Wants(k meta.ThreadKey) bool
}

// Config is what the file API needs of the daemon.
type Config struct {
	Threads Threads
	// Hub is the fs core every mount of the daemon shares.
	Hub    *fs.Hub
	Events Events
	// Changes returns the change callback of thread k's mounts and file
	// API: it turns the changes into file events.
	Changes func(k meta.ThreadKey) func(fs.EntryChange)
	Logger  hclog.Logger
}

// Files is the file API of every thread. New makes one; it holds no
// goroutine and no state of its own (the hub holds the locks, versions
// and read records), and needs no Close.
type Files struct {
	// Set by New, never changed.
	threads Threads
	hub     *fs.Hub
	events  Events
	changes func(meta.ThreadKey) func(fs.EntryChange)
	log     hclog.Logger
}

// New makes the file API over cfg's threads and hub.
func New(cfg Config) *Files {
	return &Files{
		threads: cfg.Threads, hub: cfg.Hub, events: cfg.Events, changes: cfg.Changes,
		log: cfg.Logger,
	}
}

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
func (fa *Files) withFiles(ctx context.Context, tenant, thread string, fn func(k meta.ThreadKey, f *fs.Files, mountPath string) error) error {
	k, f, mountPath, err := fa.openFiles(ctx, tenant, thread)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(k, f, mountPath)
}

// openFiles binds the thread if need be and opens its workspace for the
// file API. Close f when done.
func (fa *Files) openFiles(ctx context.Context, tenant, thread string) (k meta.ThreadKey, f *fs.Files, mountPath string, err error) {
	info, err := fa.threads.Bind(ctx, tenant, thread)
	if err != nil {
		return k, nil, "", err
	}
	k = meta.ThreadKey{Tenant: info.Tenant, Thread: info.Thread}
	_, mountPath, err = fa.threads.Paths(k)
	if err != nil {
		return k, nil, "", err
	}
	root, err := fa.threads.RootOf(info.Binding)
	if err != nil {
		return k, nil, "", err
	}
	f, err = fa.hub.Files(root, k.Tenant+"/"+k.Thread, fa.events.OnStale(k))
	if err != nil {
		return k, nil, "", err
	}
	f.WatchChanges(fa.changes(k), func() bool { return fa.events.Wants(k) })
	return k, f, mountPath, nil
}

// actorFor is the actor a file request acts as: its run, or else the
// process at the other end of the socket.
func (fa *Files) actorFor(ctx context.Context, run string) (fs.Actor, error) {
	if run != "" {
		if err := ValidRun(run); err != nil {
			return fs.Actor{}, err
		}
		return fs.RunActor(run), nil
	}
	p := call.PeerFrom(ctx)
	if p.Err != nil || p.PID <= 0 {
		return fs.Actor{}, fmt.Errorf("%w: no run given and the calling process is unknown", api.ErrInvalid)
	}
	return fa.hub.ActorOfPid(int(p.PID)), nil
}

// ValidRun refuses run ids that could not be told apart in logs.
func ValidRun(run string) error {
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
func (fa *Files) readFile(ctx context.Context, tenant, thread string, req api.ReadFileRequest) (api.ReadFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.ReadFileResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.ReadFileResponse{}, err
	}
	var out api.ReadFileResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
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
func (fa *Files) writeFile(ctx context.Context, tenant, thread string, req api.WriteFileRequest) (api.WriteFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.WriteFileResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
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
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
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
func (fa *Files) editFile(ctx context.Context, tenant, thread string, req api.EditFileRequest) (api.EditFileResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.EditFileResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.EditFileResponse{}, err
	}
	var out api.EditFileResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
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
func (fa *Files) registerRun(ctx context.Context, tenant, thread string, req api.RunRequest) (api.RunResponse, error) {
	if req.Run == "" || req.Pid == 0 {
		return api.RunResponse{}, fmt.Errorf("%w: a run and a pid are required", api.ErrInvalid)
	}
	if err := ValidRun(req.Run); err != nil {
		return api.RunResponse{}, err
	}
	if err := call.CheckRunPid(req.Pid); err != nil {
		return api.RunResponse{}, err
	}
	if _, err := fa.threads.Bind(ctx, tenant, thread); err != nil {
		return api.RunResponse{}, err
	}
	if err := fa.hub.RegisterRun(req.Pid, req.Run); err != nil {
		return api.RunResponse{}, fmt.Errorf("%w: register process %d: %v", api.ErrNotFound, req.Pid, err)
	}
	fa.log.Info("run registered", "tenant", tenant, "thread", thread, "run", req.Run, "pid", req.Pid)
	return api.RunResponse{Run: req.Run, Pid: req.Pid}, nil
}

// endRun forgets run: its registered processes and its read records.
func (fa *Files) endRun(ctx context.Context, tenant, thread string, req api.RunRequest) (api.RunResponse, error) {
	if req.Run == "" {
		return api.RunResponse{}, fmt.Errorf("%w: a run is required", api.ErrInvalid)
	}
	if err := ValidRun(req.Run); err != nil {
		return api.RunResponse{}, err
	}
	if _, err := call.ThreadKey(tenant, thread); err != nil {
		return api.RunResponse{}, err
	}
	fa.hub.EndRun(req.Run)
	return api.RunResponse{Run: req.Run}, nil
}
