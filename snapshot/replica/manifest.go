package replica

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"warren/snapshot"
)

// The encoding of a manifest (trees/<tree>), text, one item a line:
//
//	warren-replica-manifest 1
//	tree <tree hex>
//	meta <pack hex>      a pack of trees and extent maps, sorted by name
//	data <pack hex>      a pack of blobs, sorted by name, after the meta ones
//	sum <hex>            the SHA-256 of every byte above this line
//
// It lists every pack that holds an object of the tree, and no other:
// whole, not as changes from another tree's manifest, so that a fetch
// reads one manifest, and deleting one tree's manifest (a collection)
// never breaks another's. (A chain to a base's manifest would save the
// bytes of the base's pack names, a few KiB, at the price of a read per
// link on every fetch and of manifests that keep each other alive.) The
// sum line catches a manifest cut short or changed.
const (
	manifestMagic = "warren-replica-manifest 1"

	// maxManifest bounds what a fetch reads of one: about 900,000 packs.
	maxManifest = 64 << 20
)

// manifest is a tree's manifest, decoded.
type manifest struct {
	tree  snapshot.Hash
	packs []packRef
}

// packRef names a pack and says what it holds.
type packRef struct {
	name snapshot.Hash
	meta bool // trees and extent maps; else blobs
}

func manifestKey(tree snapshot.Hash) string { return "trees/" + tree.String() }
func packKey(name snapshot.Hash) string     { return "packs/" + name.String() }

// comparePacks orders a manifest's packs: the meta ones first, each
// kind by name.
func comparePacks(a, b packRef) int {
	return cmp.Or(-cmp.Compare(btoi(a.meta), btoi(b.meta)), bytes.Compare(a.name[:], b.name[:]))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// encodeManifest returns m's encoding; it sorts m.packs.
func encodeManifest(m manifest) []byte {
	slices.SortFunc(m.packs, comparePacks)
	m.packs = slices.CompactFunc(m.packs, func(a, b packRef) bool { return a.name == b.name })
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\ntree %s\n", manifestMagic, m.tree)
	for _, p := range m.packs {
		kind := "data"
		if p.meta {
			kind = "meta"
		}
		fmt.Fprintf(&b, "%s %s\n", kind, p.name)
	}
	s := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "sum %s\n", hex.EncodeToString(s[:]))
	return b.Bytes()
}

// decodeManifest decodes the manifest b of the tree. A fault is an error
// wrapping ErrCorrupt.
func decodeManifest(b []byte, tree snapshot.Hash) (manifest, error) {
	fail := func(format string, args ...any) (manifest, error) {
		return manifest{}, fmt.Errorf("%w: manifest: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	i := bytes.LastIndex(b, []byte("\nsum "))
	if i < 0 || len(b) == 0 || b[len(b)-1] != '\n' {
		return fail("no sum line at its end")
	}
	body, last := b[:i+1], strings.TrimSuffix(string(b[i+1:]), "\n")
	s := sha256.Sum256(body)
	if last != "sum "+hex.EncodeToString(s[:]) {
		return fail("its bytes do not match its sum")
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) < 2 || lines[0] != manifestMagic {
		return fail("not a manifest")
	}
	m := manifest{tree: tree}
	if lines[1] != "tree "+tree.String() {
		return fail("%q, want tree %s", lines[1], tree)
	}
	for _, line := range lines[2:] {
		kind, name, ok := strings.Cut(line, " ")
		if !ok || kind != "meta" && kind != "data" {
			return fail("line %q", line)
		}
		h, err := snapshot.ParseHash(name)
		if err != nil {
			return fail("line %q: %v", line, err)
		}
		m.packs = append(m.packs, packRef{name: h, meta: kind == "meta"})
	}
	for i := 1; i < len(m.packs); i++ {
		if comparePacks(m.packs[i-1], m.packs[i]) >= 0 {
			return fail("packs out of order, or named twice")
		}
	}
	return m, nil
}

// readManifest reads and decodes the manifest of tree from the store. A
// tree without one is an error matching ErrNotFound.
func readManifest(ctx context.Context, store Store, tree snapshot.Hash) (manifest, error) {
	rc, err := store.Get(ctx, manifestKey(tree))
	if err != nil {
		return manifest{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return manifest{}, fmt.Errorf("read %s: %w", manifestKey(tree), err)
	}
	if len(b) > maxManifest {
		return manifest{}, fmt.Errorf("%w: %s: more than %d bytes", ErrCorrupt, manifestKey(tree), maxManifest)
	}
	m, err := decodeManifest(b, tree)
	if err != nil {
		return manifest{}, fmt.Errorf("%s: %w", manifestKey(tree), err)
	}
	return m, nil
}
