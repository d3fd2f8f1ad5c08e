package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// layerSource is one layer of an image to unpack: its descriptor (digest,
// size, media type), its diff ID (the digest of the uncompressed tar, from
// the config) and where its compressed bytes are.
type layerSource struct {
	desc   v1.Descriptor
	diffID v1.Hash
	open   func() (io.ReadCloser, error)
}

// layerMediaTypes are the layers the store takes. Foreign and
// non-distributable layers (which name URLs to fetch from) and anything
// that is not a tar are refused.
var layerMediaTypes = map[types.MediaType]bool{
	types.DockerLayer:             true,
	types.DockerUncompressedLayer: true,
	types.OCILayer:                true,
	types.OCIUncompressedLayer:    true,
	types.OCILayerZStd:            true,
}

// configMediaTypes are the configs of container images.
var configMediaTypes = map[types.MediaType]bool{
	types.DockerConfigJSON: true,
	types.OCIConfigJSON:    true,
}

// zstdMaxWindow bounds a zstd stream's window, the memory its decoder
// takes: 128 MiB is zstd's --long=27, more than any builder uses.
const zstdMaxWindow = 128 << 20

// unpackLayer applies layer i of n of the image what to u. The bytes are checked against the
// layer's digest and size (the compressed bytes) and its diff ID (the
// tar): a layer is refused if either does not match, and the partial tree
// goes with the image. count gets the compressed bytes as they are read.
func unpackLayer(ctx context.Context, u *unpacker, what string, i, n int, l layerSource, count func(int64)) error {
	label := fmt.Sprintf("%s, layer %d of %d (%s)", what, i+1, n, l.desc.Digest)
	rc, err := l.open()
	if err != nil {
		return fmt.Errorf("image: opening %s: %w", label, err)
	}
	defer rc.Close()
	ch := sha256.New()
	cr := &countingReader{r: io.TeeReader(io.LimitReader(rc, l.desc.Size+1), ch), count: count}
	br := bufio.NewReaderSize(cr, 64<<10)
	magic, _ := br.Peek(4)
	var ur io.Reader = br
	closeU := func() {}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%w: %s: not gzip: %v", ErrRefused, label, err)
		}
		ur, closeU = gz, func() { gz.Close() }
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return fmt.Errorf("%w: %s: not zstd: %v", ErrRefused, label, err)
		}
		ur, closeU = zr, zr.Close
	}
	defer closeU()
	uh := sha256.New()
	tee := io.TeeReader(ur, uh)
	if err := u.apply(ctx, label, tar.NewReader(tee)); err != nil {
		if errors.Is(err, ErrRefused) {
			// A layer whose bytes are not its digest's says that first
			// (what made the tar unreadable): the rest is read to know.
			io.Copy(io.Discard, br)
			if got := digestOf(ch); cr.n != l.desc.Size || got != l.desc.Digest.String() {
				return fmt.Errorf("%w: %s: its bytes (%d, digest %s) are not the ones the manifest names (%d bytes)", ErrRefused, label, cr.n, got, l.desc.Size)
			}
		}
		return err
	}
	// The rest of the tar (its end blocks, padding) is read for the diff
	// ID, bounded like what is written.
	left := u.maxBytes - u.written
	m, err := io.Copy(io.Discard, io.LimitReader(tee, left+1))
	if err != nil {
		return fmt.Errorf("%w: %s: reading past the tar's end: %v", ErrRefused, label, err)
	}
	if m > left {
		return fmt.Errorf("%w: %s: more than %d bytes after the tar's end (the bound of one image, MaxImageBytes): a bomb", ErrRefused, label, u.maxBytes)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fmt.Errorf("%w: %s: reading past the compressed stream's end: %v", ErrRefused, label, err)
	}
	if cr.n != l.desc.Size {
		return fmt.Errorf("%w: %s: its bytes (%d) are not the ones the manifest names (%d bytes)", ErrRefused, label, cr.n, l.desc.Size)
	}
	if got := digestOf(ch); got != l.desc.Digest.String() {
		return fmt.Errorf("%w: %s: its bytes (digest %s) are not the ones the manifest names", ErrRefused, label, got)
	}
	if l.diffID.Hex != "" {
		if got := digestOf(uh); got != l.diffID.String() {
			return fmt.Errorf("%w: %s: its tar has digest %s, not the diff ID %s the config names", ErrRefused, label, got, l.diffID)
		}
	}
	return nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countingReader struct {
	r     io.Reader
	n     int64
	count func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if n > 0 && c.count != nil {
		c.count(int64(n))
	}
	return n, err
}
