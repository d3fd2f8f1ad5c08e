package images

import (
	"context"
	"fmt"
	"net/http"

	"warren/api"
	"warren/gateway/call"
	"warren/image"
	"warren/internal/progress"
)

// progressOf turns the store's reports into the call's progress frames
// (call.WithProgress): in phase "download" the bytes of the layers
// downloaded of their total, in phase "unpack" the layers unpacked of
// their number.
func progressOf(ctx context.Context) func(image.Progress) {
	report := progress.Of(ctx)
	return func(p image.Progress) {
		f := progress.Frame{Phase: p.Phase, Done: p.Done, Total: p.Total}
		if p.Phase == "unpack" {
			f.Done, f.Total = int64(p.LayersDone), int64(p.Layers)
		}
		report(f)
	}
}

// Handlers answer the image calls.
type Handlers struct{ im *Images }

// NewHandlers returns the image calls' handlers.
func NewHandlers(im *Images) *Handlers { return &Handlers{im: im} }

// List answers GET /v1/images.
func (h *Handlers) List(r *http.Request, _ call.Params) (any, error) {
	if err := call.NoQuery(r); err != nil {
		return nil, err
	}
	resp, err := h.im.List(r.Context())
	if err != nil {
		return nil, err
	}
	return api.ImagesResponse{Images: resp.Images, StoreBytes: resp.StoreBytes, LimitBytes: resp.LimitBytes}, nil
}

// Pull answers POST /v1/images/pull, as a progress stream on request.
func (h *Handlers) Pull(r *http.Request, _ call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.PullRequest
		if err := call.DecodeBody(r, &req, false); err != nil {
			return nil, err
		}
		img, err := h.im.Pull(ctx, req.Ref)
		if err != nil {
			return nil, err
		}
		return api.ImageResponse{Image: img}, nil
	})
}

// Load answers POST /v1/images/load, as a progress stream on request.
func (h *Handlers) Load(r *http.Request, _ call.Params) (any, error) {
	return call.WithProgress(r, func(ctx context.Context) (any, error) {
		var req api.LoadRequest
		if err := call.DecodeBody(r, &req, false); err != nil {
			return nil, err
		}
		img, err := h.im.Load(ctx, req.Path, req.Name)
		if err != nil {
			return nil, err
		}
		return api.ImageResponse{Image: img}, nil
	})
}

// Remove answers DELETE /v1/images?ref=REF.
func (h *Handlers) Remove(r *http.Request, _ call.Params) (any, error) {
	q, err := call.Query(r, "ref")
	if err != nil {
		return nil, err
	}
	ref := q.Get("ref")
	if ref == "" {
		return nil, fmt.Errorf("%w: name the image: DELETE /v1/images?ref=REF", api.ErrInvalid)
	}
	removed, err := h.im.Remove(r.Context(), ref)
	if err != nil {
		return nil, err
	}
	return api.RemoveImageResponse{Removed: removed}, nil
}
