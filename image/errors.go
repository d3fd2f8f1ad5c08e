package image

import "errors"

// The errors every failure of the store wraps, so that the daemon can answer
// with the right status without reading messages. The message itself says
// what happened: which layer, which entry, which bound.
var (
	// ErrStoreFull: the images would take more than Config.StoreBytes.
	ErrStoreFull = errors.New("image: store full")
	// ErrNotAllowed: the registry is not one of Config.Registries, or an
	// address it led to is one the store never dials (loopback, private,
	// link-local, the metadata address...), or plain HTTP to a registry
	// that may not have it.
	ErrNotAllowed = errors.New("image: not allowed")
	// ErrRefused: the image is hostile or broken: an entry leading out of
	// the rootfs, a digest that does not match, a bomb past a bound, a
	// platform the image does not serve, a kind of manifest or layer the
	// store does not take.
	ErrRefused = errors.New("image: refused")
	// ErrNotFound: no such image, in the store or in the registry.
	ErrNotFound = errors.New("image: not found")
)
