package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
)

// The file API's tree calls and raw content: list, stat, exists, mkdir,
// remove and rename a thread's entries, and read or write a file of any
// size as the raw body of a request or answer. As the other file calls,
// each works on the backing folder through the fs core, through the same
// locks, versions, read records and change log as the thread's mounts,
// and for the run it names (or the calling process). Paths follow the
// file API's rules (call.CheckPath, inWorkspace); every refusal is answered
// and logged by the router with the thread and the path.

// defaultFolderMode is the mode of a folder mkdir makes when the call
// gives none.
const defaultFolderMode = 0o755

// requirePath refuses an empty or impossible path in field.
func requirePath(field, p string) error {
	if p == "" {
		return fmt.Errorf("%w: %s is required", api.ErrInvalid, field)
	}
	return call.CheckPath(field, p)
}

// checkMode refuses a mode that is not permission bits.
func checkMode(mode uint32) error {
	if mode > 0o7777 {
		return fmt.Errorf("%w: mode %#o is not a permission mode (at most 07777)", api.ErrInvalid, mode)
	}
	return nil
}

// entryOf is the API's form of an entry.
func entryOf(e fs.EntryInfo) api.Entry {
	return api.Entry{
		Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode,
		MTime: e.MTime, Version: e.Version, Target: e.Target,
	}
}

// listFiles lists a folder of the thread's workspace.
func (fa *Files) listFiles(ctx context.Context, tenant, thread string, req api.ListRequest) (api.ListResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.ListResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.ListResponse{}, err
	}
	var out api.ListResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		es, err := f.List(ctx, a, inWorkspace(req.Path, mountPath))
		if err != nil {
			return fileError(err)
		}
		out = api.ListResponse{Path: req.Path, Entries: make([]api.Entry, 0, len(es))}
		for _, e := range es {
			out.Entries = append(out.Entries, entryOf(e))
		}
		return nil
	})
	return out, err
}

// statFile describes an entry of the thread's workspace.
func (fa *Files) statFile(ctx context.Context, tenant, thread string, req api.StatRequest) (api.StatResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.StatResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.StatResponse{}, err
	}
	var out api.StatResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		e, err := f.Stat(ctx, a, inWorkspace(req.Path, mountPath), req.Follow)
		if err != nil {
			return fileError(err)
		}
		out = api.StatResponse{Path: req.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode,
			MTime: e.MTime, Version: e.Version, Target: e.Target}
		return nil
	})
	return out, err
}

// fileExists says whether a path of the thread's workspace names an
// entry.
func (fa *Files) fileExists(ctx context.Context, tenant, thread string, req api.ExistsRequest) (api.ExistsResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.ExistsResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.ExistsResponse{}, err
	}
	var out api.ExistsResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		ok, typ, err := f.Exists(ctx, a, inWorkspace(req.Path, mountPath))
		if err != nil {
			return fileError(err)
		}
		out = api.ExistsResponse{Path: req.Path, Exists: ok, Type: string(typ)}
		return nil
	})
	return out, err
}

// makeFolder makes a folder of the thread's workspace.
func (fa *Files) makeFolder(ctx context.Context, tenant, thread string, req api.MkdirRequest) (api.MkdirResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.MkdirResponse{}, err
	}
	mode := uint32(defaultFolderMode)
	if req.Mode != nil {
		if err := checkMode(*req.Mode); err != nil {
			return api.MkdirResponse{}, err
		}
		mode = *req.Mode
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.MkdirResponse{}, err
	}
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		return fileError(f.Mkdir(ctx, a, inWorkspace(req.Path, mountPath), req.Parents, mode))
	})
	if err != nil {
		return api.MkdirResponse{}, err
	}
	return api.MkdirResponse{Path: req.Path}, nil
}

// removeFile removes an entry (with Recursive, a tree) of the thread's
// workspace.
func (fa *Files) removeFile(ctx context.Context, tenant, thread string, req api.RemoveRequest) (api.RemoveResponse, error) {
	if err := requirePath("path", req.Path); err != nil {
		return api.RemoveResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.RemoveResponse{}, err
	}
	var out api.RemoveResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		n, err := f.Remove(ctx, a, inWorkspace(req.Path, mountPath), req.Recursive)
		if err != nil {
			if n > 0 {
				// A remove refused half way (a race with another
				// writer): say what went.
				fa.log.Warn("refused: remove stopped half way", "tenant", call.Clip(tenant), "thread", call.Clip(thread),
					"path", call.Clip(req.Path), "removed", n, "error", err)
			}
			return fileError(err)
		}
		out = api.RemoveResponse{Path: req.Path, Removed: n}
		return nil
	})
	return out, err
}

// renameFile moves an entry of the thread's workspace.
func (fa *Files) renameFile(ctx context.Context, tenant, thread string, req api.RenameRequest) (api.RenameResponse, error) {
	if err := requirePath("from", req.From); err != nil {
		return api.RenameResponse{}, err
	}
	if err := requirePath("to", req.To); err != nil {
		return api.RenameResponse{}, err
	}
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.RenameResponse{}, err
	}
	var out api.RenameResponse
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		v, err := f.Rename(ctx, a, inWorkspace(req.From, mountPath), inWorkspace(req.To, mountPath), req.Overwrite)
		if err != nil {
			return renameError(err)
		}
		out = api.RenameResponse{From: req.From, To: req.To, Version: v}
		return nil
	})
	return out, err
}

// renameError is fileError, and what rename(2) refuses: a folder moved
// into itself (the request cannot work), a file and a folder over one
// another or a tree too big to check for links (the workspace's state
// is in the way).
func renameError(err error) error {
	if e := fileError(err); e != err {
		return e
	}
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno) && errno == syscall.EINVAL:
		return call.Refuse(api.ErrInvalid, err.Error())
	case errors.As(err, &errno) && (errno == syscall.EISDIR || errno == syscall.ENOTDIR || errno == syscall.EXDEV):
		return call.Refuse(api.ErrConflict, err.Error())
	}
	return err
}

// RawQuery reads the query of a .../files/raw call: its path, run and,
// where allowed, mode (octal, as chmod takes it).
func RawQuery(r *http.Request, withMode bool) (api.RawRequest, error) {
	keys := []string{"path", "run"}
	if withMode {
		keys = append(keys, "mode")
	}
	q, err := call.Query(r, keys...)
	if err != nil {
		return api.RawRequest{}, err
	}
	req := api.RawRequest{Path: q.Get("path"), Run: q.Get("run")}
	if err := requirePath("path", req.Path); err != nil {
		return api.RawRequest{}, err
	}
	if m, ok := q["mode"]; ok {
		v, err := strconv.ParseUint(m[0], 8, 32)
		if err != nil || checkMode(uint32(v)) != nil {
			return api.RawRequest{}, fmt.Errorf("%w: mode %s is not an octal permission mode such as 0644", api.ErrInvalid, call.Quote(m[0]))
		}
		mode := uint32(v)
		req.Mode = &mode
	}
	return req, nil
}

// readRaw opens a file of the thread's workspace for its content to go
// out as the raw body of the answer (rawStream).
func (fa *Files) readRaw(ctx context.Context, tenant, thread string, req api.RawRequest) (*rawStream, error) {
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return nil, err
	}
	k, f, mountPath, err := fa.openFiles(ctx, tenant, thread)
	if err != nil {
		return nil, err
	}
	fr, err := f.OpenRead(ctx, a, inWorkspace(req.Path, mountPath))
	if err != nil {
		f.Close()
		return nil, fileError(err)
	}
	return &rawStream{log: fa.log, k: k, path: req.Path, f: f, fr: fr}, nil
}

// rawStream is a file's content as an answer: the bytes, with their size
// and version in the headers. Once the headers are out a failure can
// only cut the answer short of its Content-Length, which the client sees.
type rawStream struct {
	log  hclog.Logger
	k    meta.ThreadKey
	path string
	f    *fs.Files
	fr   *fs.FileReader
}

func (s *rawStream) ServeStream(w http.ResponseWriter, r *http.Request) {
	defer s.f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(s.fr.Size, 10))
	h.Set(api.VersionHeader, strconv.FormatUint(s.fr.Version, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	n, err := io.CopyBuffer(writerOnly{w}, s.fr, make([]byte, 256<<10))
	// Closing records the read, if every byte went out.
	if cerr := s.fr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.log.Warn("file content cut short", "tenant", call.Clip(s.k.Tenant), "thread", call.Clip(s.k.Thread),
			"path", call.Clip(s.path), "sent", n, "size", s.fr.Size, "error", err)
	}
}

// writerOnly hides every method of a writer but Write, so that a copy
// goes through the copy's own buffer.
type writerOnly struct{ io.Writer }

// writeRaw writes the raw body of the request as a file of the thread's
// workspace. The body may come slowly: while it comes, the upload holds
// its temporary file and nothing else (no Files, no folder), so that a
// stalled upload costs the daemon two descriptors, with its connection.
func (fa *Files) writeRaw(ctx context.Context, tenant, thread string, req api.RawRequest, body io.Reader) (api.RawInfo, error) {
	a, err := fa.actorFor(ctx, req.Run)
	if err != nil {
		return api.RawInfo{}, err
	}
	var u *fs.Upload
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, mountPath string) error {
		u, err = f.StartUpload(ctx, a, inWorkspace(req.Path, mountPath))
		return fileError(err)
	})
	if err != nil {
		return api.RawInfo{}, err
	}
	defer u.Close()
	n, err := u.ReadFrom(ctx, body)
	if err != nil {
		return api.RawInfo{}, fileError(err)
	}
	var out api.RawInfo
	err = fa.withFiles(ctx, tenant, thread, func(_ meta.ThreadKey, f *fs.Files, _ string) error {
		v, err := f.FinishUpload(u, req.Mode)
		if err != nil {
			return fileError(err)
		}
		out = api.RawInfo{Path: req.Path, Size: n, Version: v}
		return nil
	})
	return out, err
}
