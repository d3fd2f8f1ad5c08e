package gateway

import (
	"net/http"

	"warren/api"
	"warren/gateway/call"
)

// The handlers of the file API's tree calls and raw content (tree.go).

func (g *Gateway) handleListFiles(r *http.Request, p call.Params) (any, error) {
	var req api.ListRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.listFiles(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleStatFile(r *http.Request, p call.Params) (any, error) {
	var req api.StatRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.statFile(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleFileExists(r *http.Request, p call.Params) (any, error) {
	var req api.ExistsRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.fileExists(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleMkdir(r *http.Request, p call.Params) (any, error) {
	var req api.MkdirRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.makeFolder(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleRemoveFile(r *http.Request, p call.Params) (any, error) {
	var req api.RemoveRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.removeFile(r.Context(), p.Tenant, p.Thread, req)
}

func (g *Gateway) handleRenameFile(r *http.Request, p call.Params) (any, error) {
	var req api.RenameRequest
	if err := call.DecodeBody(r, &req, false); err != nil {
		return nil, err
	}
	return g.renameFile(r.Context(), p.Tenant, p.Thread, req)
}

// handleReadRaw answers a call.Streamer: the file's bytes.
func (g *Gateway) handleReadRaw(r *http.Request, p call.Params) (any, error) {
	req, err := rawQuery(r, false)
	if err != nil {
		return nil, err
	}
	return g.readRaw(r.Context(), p.Tenant, p.Thread, req)
}

// handleWriteRaw streams the request's body, of any size, into the file
// (bodyLimit gives its route none; the body timeout bounds each pause).
func (g *Gateway) handleWriteRaw(r *http.Request, p call.Params) (any, error) {
	req, err := rawQuery(r, true)
	if err != nil {
		return nil, err
	}
	return g.writeRaw(r.Context(), p.Tenant, p.Thread, req, r.Body)
}
