package files

import (
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// The handlers of the file API: the route table (package gateway) calls
// them; each reads its request and calls the file API.

// Handlers are the file API's handlers.
type Handlers struct {
	fa *Files
}

// NewHandlers returns the handlers of fa.
func NewHandlers(fa *Files) *Handlers { return &Handlers{fa: fa} }

func (h *Handlers) ReadFile(r *http.Request, p call.Params) (any, error) {
	var req api.ReadFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.readFile(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) WriteFile(r *http.Request, p call.Params) (any, error) {
	var req api.WriteFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.writeFile(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) EditFile(r *http.Request, p call.Params) (any, error) {
	var req api.EditFileRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.editFile(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) RegisterRun(r *http.Request, p call.Params) (any, error) {
	var req api.RunRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.registerRun(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) EndRun(r *http.Request, p call.Params) (any, error) {
	var req api.RunRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.endRun(r.Context(), p.Tenant, p.Thread, req)
}

// The tree calls and raw content (tree.go).

func (h *Handlers) ListFiles(r *http.Request, p call.Params) (any, error) {
	var req api.ListRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.listFiles(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) StatFile(r *http.Request, p call.Params) (any, error) {
	var req api.StatRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.statFile(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) FileExists(r *http.Request, p call.Params) (any, error) {
	var req api.ExistsRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.fileExists(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) Mkdir(r *http.Request, p call.Params) (any, error) {
	var req api.MkdirRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.makeFolder(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) RemoveFile(r *http.Request, p call.Params) (any, error) {
	var req api.RemoveRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.removeFile(r.Context(), p.Tenant, p.Thread, req)
}

func (h *Handlers) RenameFile(r *http.Request, p call.Params) (any, error) {
	var req api.RenameRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return h.fa.renameFile(r.Context(), p.Tenant, p.Thread, req)
}

// ReadRaw answers a call.Streamer: the file's bytes.
func (h *Handlers) ReadRaw(r *http.Request, p call.Params) (any, error) {
	req, err := RawQuery(r, false)
	if err != nil {
		return nil, err
	}
	return h.fa.readRaw(r.Context(), p.Tenant, p.Thread, req)
}

// WriteRaw streams the request's body, of any size, into the file (the
// router's bodyLimit gives its route none; the body timeout bounds each
// pause).
func (h *Handlers) WriteRaw(r *http.Request, p call.Params) (any, error) {
	req, err := RawQuery(r, true)
	if err != nil {
		return nil, err
	}
	return h.fa.writeRaw(r.Context(), p.Tenant, p.Thread, req, r.Body)
}
