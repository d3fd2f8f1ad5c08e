package client

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"warren/api"
)

// rawQuery is the query of a .../files/raw call.
func rawQuery(req api.RawRequest) url.Values {
	q := url.Values{"path": {req.Path}}
	if req.Run != "" {
		q.Set("run", req.Run)
	}
	if req.Mode != nil {
		q.Set("mode", fmt.Sprintf("%04o", *req.Mode))
	}
	return q
}

// Read reads a file of a thread's workspace for a run.
func (f Files) Read(ctx context.Context, tenant, thread string, req api.ReadFileRequest) (api.ReadFileResponse, error) {
	var out api.ReadFileResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/read", nil, req, &out)
	return out, err
}

// Write writes a file of a thread's workspace for a run.
func (f Files) Write(ctx context.Context, tenant, thread string, req api.WriteFileRequest) (api.WriteFileResponse, error) {
	var out api.WriteFileResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/write", nil, req, &out)
	return out, err
}

// Edit edits a file of a thread's workspace for a run.
func (f Files) Edit(ctx context.Context, tenant, thread string, req api.EditFileRequest) (api.EditFileResponse, error) {
	var out api.EditFileResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/edit", nil, req, &out)
	return out, err
}

// List lists a folder of a thread's workspace.
func (f Files) List(ctx context.Context, tenant, thread string, req api.ListRequest) (api.ListResponse, error) {
	var out api.ListResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/list", nil, req, &out)
	return out, err
}

// Stat describes an entry of a thread's workspace; an error matching
// api.ErrNotFound if there is none.
func (f Files) Stat(ctx context.Context, tenant, thread string, req api.StatRequest) (api.StatResponse, error) {
	var out api.StatResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/stat", nil, req, &out)
	return out, err
}

// Exists says whether a path of a thread's workspace names an entry.
func (f Files) Exists(ctx context.Context, tenant, thread string, req api.ExistsRequest) (api.ExistsResponse, error) {
	var out api.ExistsResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/exists", nil, req, &out)
	return out, err
}

// Mkdir makes a folder of a thread's workspace.
func (f Files) Mkdir(ctx context.Context, tenant, thread string, req api.MkdirRequest) error {
	return f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/mkdir", nil, req, &api.MkdirResponse{})
}

// Remove removes an entry, or with Recursive a tree, of a thread's
// workspace, and says how many entries went.
func (f Files) Remove(ctx context.Context, tenant, thread string, req api.RemoveRequest) (api.RemoveResponse, error) {
	var out api.RemoveResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/remove", nil, req, &out)
	return out, err
}

// Rename moves an entry of a thread's workspace.
func (f Files) Rename(ctx context.Context, tenant, thread string, req api.RenameRequest) (api.RenameResponse, error) {
	var out api.RenameResponse
	err := f.c.do(ctx, methodPost, threadPath(tenant, thread)+"/files/rename", nil, req, &out)
	return out, err
}

// ReadRaw copies the content of a file of a thread's workspace, of any
// size, to w as it arrives, and returns its size and version. The read
// counts for req.Run (or the calling process) once every byte arrived. A
// content cut short is an error, after w got what came.
func (f Files) ReadRaw(ctx context.Context, tenant, thread string, req api.RawRequest, w io.Writer) (api.RawInfo, error) {
	path := threadPath(tenant, thread) + "/files/raw"
	resp, err := f.c.send(ctx, methodGet, path, rawQuery(req), nil)
	if err != nil {
		return api.RawInfo{}, err
	}
	defer resp.Body.Close()
	info := api.RawInfo{Path: req.Path, Size: resp.ContentLength}
	if info.Version, err = strconv.ParseUint(resp.Header.Get(api.VersionHeader), 10, 64); err != nil {
		return info, fmt.Errorf("GET %s: the answer's %s: %w", path, api.VersionHeader, err)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return info, fmt.Errorf("GET %s: read the content: %w", path, err)
	}
	if n != info.Size {
		return info, fmt.Errorf("GET %s: %d bytes of %d arrived", path, n, info.Size)
	}
	return info, nil
}

// WriteRaw replaces the content of a file of a thread's workspace (made,
// with its folders, if need be) with all that r gives, of any size, sent
// as it is read; req.Mode, if set, is the file's mode. A reader whose
// size is known (a *bytes.Reader, *strings.Reader or *bytes.Buffer) is
// sent with its length, any other chunked.
func (f Files) WriteRaw(ctx context.Context, tenant, thread string, req api.RawRequest, r io.Reader) (api.RawInfo, error) {
	path := threadPath(tenant, thread) + "/files/raw"
	resp, err := f.c.sendBody(ctx, methodPut, path, rawQuery(req), "application/octet-stream", r)
	if err != nil {
		return api.RawInfo{}, err
	}
	defer resp.Body.Close()
	var out api.RawInfo
	if err := decodeAnswer(methodPut, path, resp, &out); err != nil {
		return api.RawInfo{}, err
	}
	return out, nil
}

// Files is the file API of a thread's workspace: its files read, written
// and edited for a run, its tree and its raw content.
type Files struct{ c *Client }

// Files returns the file API of c's daemon.
func (c *Client) Files() Files { return Files{c} }
