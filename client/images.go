package client

import (
	"context"
	"net/url"

	"warren/api"
)

// Images is the image API of a daemon: the image store its jails' roots
// come from.
type Images struct{ c *Client }

// Images returns the image API of c's daemon.
func (c *Client) Images() Images { return Images{c} }

// List returns the store's images, each with the bound threads pinned to
// it, and the store's size.
func (im Images) List(ctx context.Context) (api.ImagesResponse, error) {
	var out api.ImagesResponse
	err := im.c.do(ctx, methodGet, "/v1/images", nil, nil, &out)
	return out, err
}

// Pull fetches ref into the daemon's store (nothing is fetched if it
// holds it already). A long call: see WithProgress.
func (im Images) Pull(ctx context.Context, ref string) (api.Image, error) {
	var out api.ImageResponse
	err := im.c.doLong(ctx, methodPost, "/v1/images/pull", api.PullRequest{Ref: ref}, &out)
	return out.Image, err
}

// Load adds the image of an archive on the daemon's disk (an OCI image
// layout in a tar, or a docker save tarball) to its store, named name or
// as the archive names it. A long call: see WithProgress.
func (im Images) Load(ctx context.Context, path, name string) (api.Image, error) {
	var out api.ImageResponse
	err := im.c.doLong(ctx, methodPost, "/v1/images/load", api.LoadRequest{Path: path, Name: name}, &out)
	return out.Image, err
}

// Remove takes an image (by reference or digest) out of the store;
// refused while a bound thread is pinned to it.
func (im Images) Remove(ctx context.Context, ref string) error {
	return im.c.do(ctx, methodDelete, "/v1/images", url.Values{"ref": {ref}}, nil, &api.RemoveImageResponse{})
}
