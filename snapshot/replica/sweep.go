package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"warren/snapshot"
)

// LiveFunc lists the trees whose checkpoints are kept, by every server
// that uses the store: their manifests, and the packs those name, stay.
type LiveFunc func(ctx context.Context) ([]snapshot.Hash, error)

// SweepOptions tune a Sweep.
type SweepOptions struct {
	// Grace is how old a pack no manifest names must be before it goes,
	// and how long the packs of a manifest deleted stay after it: longer
	// than any upload lasts (UploadOptions.Refresh included; see the
	// package doc, Collection). 0 deletes at once what no manifest names:
	// only for a store that nothing uploads to while it sweeps (tests).
	Grace time.Duration
	// Now is the clock the ages of what the store holds (their ModTime,
	// by the store's clock) are measured against; nil is time.Now. The
	// two clocks must agree to well within Grace.
	Now func() time.Time
}

// SweepStats say what a Sweep found and did.
type SweepStats struct {
	Manifests int   // manifests deleted: their trees are not live
	Restored  int   // manifests put back: their trees were live again (see Sweep)
	Packs     int   // packs deleted: no manifest names them, and they are older than the grace
	Freed     int64 // bytes of the manifests and packs deleted
	Aborted   int   // remains of uploads cut short removed (S3 multipart uploads, a folder's temporary files)

	KeptManifests int // manifests kept: their trees are live
	KeptPacks     int // packs kept, of which:
	Young         int // no manifest names them, but they are younger than the grace (an upload may be writing them)
	Held          int // only the manifests deleted less than a grace ago name them
}

// The hold records (holds/<20 digits>-<16 hex>): the manifests a sweep
// deleted, whole, text then those bytes:
//
//	warren-replica-hold 1
//	open | sealed
//	manifest <tree hex> <length>
//	<length bytes: the manifest, as trees/<tree> held it>
//	...
//	sum <hex>            the SHA-256 of every byte above this line
//
// A sweep writes one, open, before it deletes the manifests it holds,
// and again, sealed, once they are deleted: a sealed record's ModTime
// follows every delete it holds for. While a record is not expired (open,
// or sealed less than a grace ago) the packs its manifests name stay,
// and a manifest of it whose tree is live again is put back.
const (
	holdMagic  = "warren-replica-hold 1"
	holdPrefix = "holds/"
	// holdBatch bounds the manifests' bytes of one hold record (a larger
	// manifest goes alone in one).
	holdBatch = 16 << 20
	// maxHold bounds what a sweep reads of a hold record.
	maxHold = holdBatch + maxManifest + 1<<20
)

// hold is a hold record, decoded.
type hold struct {
	info      Info // as List found it (Key and ModTime)
	sealed    bool
	manifests []heldManifest
}

// heldManifest is a manifest deleted, as the store held it.
type heldManifest struct {
	m   manifest
	raw []byte
}

func (h *hold) encode() []byte {
	var b bytes.Buffer
	state := "open"
	if h.sealed {
		state = "sealed"
	}
	fmt.Fprintf(&b, "%s\n%s\n", holdMagic, state)
	for _, hm := range h.manifests {
		fmt.Fprintf(&b, "manifest %s %d\n", hm.m.tree, len(hm.raw))
		b.Write(hm.raw)
	}
	s := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "sum %s\n", hex.EncodeToString(s[:]))
	return b.Bytes()
}

// decodeHold decodes the hold record b. A fault is an error wrapping
// ErrCorrupt.
func decodeHold(b []byte) (*hold, error) {
	fail := func(format string, args ...any) (*hold, error) {
		return nil, fmt.Errorf("%w: hold record: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	i := bytes.LastIndex(b, []byte("\nsum "))
	if i < 0 || b[len(b)-1] != '\n' {
		return fail("no sum line at its end")
	}
	body := b[:i+1]
	s := sha256.Sum256(body)
	if string(b[i+1:]) != "sum "+hex.EncodeToString(s[:])+"\n" {
		return fail("its bytes do not match its sum")
	}
	line := func() (string, bool) {
		l, rest, ok := bytes.Cut(body, []byte("\n"))
		body = rest
		return string(l), ok
	}
	h := &hold{}
	if l, _ := line(); l != holdMagic {
		return fail("not a hold record")
	}
	switch l, _ := line(); l {
	case "open":
	case "sealed":
		h.sealed = true
	default:
		return fail("state %q", l)
	}
	for len(body) > 0 {
		l, _ := line()
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "manifest" {
			return fail("line %q", l)
		}
		tree, err := snapshot.ParseHash(f[1])
		if err != nil {
			return fail("line %q: %v", l, err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > len(body) {
			return fail("line %q: a length past its end", l)
		}
		raw := body[:n:n]
		body = body[n:]
		m, err := decodeManifest(raw, tree)
		if err != nil {
			return fail("manifest of tree %s: %v", tree, err)
		}
		h.manifests = append(h.manifests, heldManifest{m: m, raw: raw})
	}
	return h, nil
}

// holdKey names a new hold record: its time first, so that a listing in
// order is one in age, then a random part, so that two sweeps at once
// never write one record.
func holdKey(now time.Time) string {
	var rnd [8]byte
	rand.Read(rnd[:])
	return fmt.Sprintf("%s%020d-%s", holdPrefix, now.UnixNano(), hex.EncodeToString(rnd[:]))
}

// aborter is a store that can be left the remains of Puts cut short
// (S3's multipart uploads, a folder's temporary files); removeAborted
// removes those begun before a time, and says how many.
type aborter interface {
	removeAborted(ctx context.Context, before time.Time) (int, error)
}

// Sweep collects the store: it deletes the manifests of the trees that
// live does not list, then the packs that no manifest names and that are
// older than the grace, and the remains of uploads cut short longer than
// the grace ago. It is the mark and sweep of the package doc
// (Collection), in this order:
//
//  1. Take the time t0, then list the manifests, then the hold records
//     (so that a manifest another sweep deleted before the listing has
//     its record listed), then ask live for the live trees. An error in
//     any of these, or reading any manifest or record, stops the sweep
//     before it deletes anything more: it fails closed.
//  2. Put back, from the hold records, the manifests of live trees that
//     the store lacks (see 4).
//  3. Read every manifest; those of trees not live are dead.
//  4. Write the dead ones, whole, in hold records (open), delete them,
//     then ask live again: a tree live by then (a new checkpoint of the
//     same content, whose upload found the manifest there and took it as
//     its own) has its manifest put back. Then seal the records. A crash
//     in between leaves the record open: the next sweep puts back what is
//     live, and seals it a grace later.
//  5. Mark: the packs that the manifests kept and the records not expired
//     (open, or sealed less than a grace before t0) name.
//  6. Delete every pack not marked whose ModTime is more than a grace
//     before t0; then the expired records, then the remains of uploads.
//
// Why the packs an upload needs stay: a pack it sent or refreshed is
// younger than the grace until its manifest is written, and a manifest
// written before t0 is listed in 1. A pack it reuses from a base's
// manifest was named by that manifest when the upload read it: that
// manifest is listed, or was deleted after the upload began and its hold
// record, sealed after the delete, keeps the pack a grace longer, past the
// upload's end. Two sweeps at once are as safe: each writes its record
// before it deletes, and reads each manifest it lists (one the other
// deleted meanwhile is an error: it stops).
//
// A manifest put back in 4 is missing from the store for the moment in
// between: a Fetch of that tree then fails, and may be tried again. Sweep
// starts no goroutine.
func Sweep(ctx context.Context, store Store, live LiveFunc, opts SweepOptions) (SweepStats, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &sweeper{store: store, live: live, opts: opts, trees: make(map[snapshot.Hash]Info)}
	if err := s.run(ctx); err != nil {
		return s.st, fmt.Errorf("replica: sweep: %w", err)
	}
	return s.st, nil
}

// sweeper is one Sweep's state.
type sweeper struct {
	store Store
	live  LiveFunc
	opts  SweepOptions
	st    SweepStats

	t0    time.Time
	trees map[snapshot.Hash]Info // the manifests listed, less those deleted
	holds []*hold
	alive map[snapshot.Hash]bool
}

func (s *sweeper) run(ctx context.Context) error {
	s.t0 = s.opts.Now()
	if err := s.list(ctx); err != nil {
		return err
	}
	if err := s.restore(ctx, nil); err != nil {
		return err
	}
	kept, dead, err := s.readManifests(ctx)
	if err != nil {
		return err
	}
	if err := s.drop(ctx, dead); err != nil {
		return err
	}
	marked := make(map[snapshot.Hash]bool)
	for _, m := range kept {
		for _, p := range m.packs {
			marked[p.name] = true
		}
	}
	held := make(map[snapshot.Hash]bool)
	var expired []*hold
	for _, h := range s.holds {
		switch {
		case h.sealed && s.t0.Sub(h.info.ModTime) > s.opts.Grace:
			expired = append(expired, h)
			continue
		case !h.sealed && s.t0.Sub(h.info.ModTime) > s.opts.Grace:
			// Its sweep ended (a crash) without sealing it: seal it now,
			// later than its deletes, and hold a grace from now.
			if err := s.seal(ctx, h); err != nil {
				return err
			}
		}
		for _, hm := range h.manifests {
			for _, p := range hm.m.packs {
				held[p.name] = true
			}
		}
	}
	if err := s.sweepPacks(ctx, marked, held); err != nil {
		return err
	}
	for _, h := range expired {
		if err := s.store.Delete(ctx, h.info.Key); err != nil {
			return fmt.Errorf("delete an expired hold record: %w", err)
		}
	}
	if a, ok := s.store.(aborter); ok {
		n, err := a.removeAborted(ctx, s.t0.Add(-s.opts.Grace))
		s.st.Aborted += n
		if err != nil {
			return fmt.Errorf("remove uploads cut short: %w", err)
		}
	}
	return nil
}

// list lists the manifests, then the hold records (reading them), then
// the live trees.
func (s *sweeper) list(ctx context.Context) error {
	err := s.store.List(ctx, "trees/", func(i Info) error {
		if h, err := snapshot.ParseHash(strings.TrimPrefix(i.Key, "trees/")); err == nil {
			s.trees[h] = i
		}
		return nil // not a key this package writes
	})
	if err != nil {
		return fmt.Errorf("list the manifests: %w", err)
	}
	var infos []Info
	if err := s.store.List(ctx, holdPrefix, func(i Info) error { infos = append(infos, i); return nil }); err != nil {
		return fmt.Errorf("list the hold records: %w", err)
	}
	for _, i := range infos {
		b, err := s.read(ctx, i.Key, maxHold)
		if err != nil {
			return fmt.Errorf("hold record %s: %w", i.Key, err)
		}
		h, err := decodeHold(b)
		if err != nil {
			return fmt.Errorf("%s: %w", i.Key, err)
		}
		h.info = i
		s.holds = append(s.holds, h)
	}
	s.alive, err = s.listLive(ctx)
	return err
}

// listLive asks for the live trees.
func (s *sweeper) listLive(ctx context.Context) (map[snapshot.Hash]bool, error) {
	trees, err := s.live(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the live trees: %w", err)
	}
	alive := make(map[snapshot.Hash]bool, len(trees))
	for _, t := range trees {
		alive[t] = true
	}
	return alive, nil
}

// read reads key whole, up to limit bytes.
func (s *sweeper) read(ctx context.Context, key string, limit int64) ([]byte, error) {
	rc, err := s.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s: more than %d bytes", ErrCorrupt, key, limit)
	}
	return b, nil
}

// restore puts back the manifests of the hold records (and, if not nil,
// of extra) whose trees are live and that the store lacks.
func (s *sweeper) restore(ctx context.Context, extra []heldManifest) error {
	var all []heldManifest
	for _, h := range s.holds {
		all = append(all, h.manifests...)
	}
	all = append(all, extra...)
	for _, hm := range all {
		if _, there := s.trees[hm.m.tree]; there || !s.alive[hm.m.tree] {
			continue
		}
		key := manifestKey(hm.m.tree)
		if err := s.store.Put(ctx, key, bytes.NewReader(hm.raw), int64(len(hm.raw))); err != nil {
			return fmt.Errorf("put back the manifest of live tree %s: %w", hm.m.tree, err)
		}
		s.trees[hm.m.tree] = Info{Key: key, Size: int64(len(hm.raw))}
		s.st.Restored++
	}
	return nil
}

// readManifests reads every manifest listed: those of live trees are
// kept, the others dead.
func (s *sweeper) readManifests(ctx context.Context) (kept []manifest, dead []heldManifest, err error) {
	for tree, i := range s.trees {
		b, err := s.read(ctx, i.Key, maxManifest)
		if err != nil {
			return nil, nil, fmt.Errorf("manifest of tree %s: %w", tree, err)
		}
		m, err := decodeManifest(b, tree)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", i.Key, err)
		}
		if s.alive[tree] {
			kept = append(kept, m)
			s.st.KeptManifests++
		} else {
			dead = append(dead, heldManifest{m: m, raw: b})
		}
	}
	return kept, dead, nil
}

// drop deletes the dead manifests, held (step 4 of Sweep).
func (s *sweeper) drop(ctx context.Context, dead []heldManifest) error {
	if len(dead) == 0 {
		return nil
	}
	var mine []*hold
	for len(dead) > 0 {
		h := &hold{info: Info{Key: holdKey(s.opts.Now())}}
		size := 0
		for len(dead) > 0 && (size == 0 || size+len(dead[0].raw) <= holdBatch) {
			size += len(dead[0].raw)
			h.manifests = append(h.manifests, dead[0])
			dead = dead[1:]
		}
		b := h.encode()
		if err := s.store.Put(ctx, h.info.Key, bytes.NewReader(b), int64(len(b))); err != nil {
			return fmt.Errorf("write a hold record: %w", err)
		}
		mine = append(mine, h)
		s.holds = append(s.holds, h)
	}
	var gone []heldManifest
	for _, h := range mine {
		for _, hm := range h.manifests {
			if err := s.store.Delete(ctx, manifestKey(hm.m.tree)); err != nil {
				return fmt.Errorf("delete the manifest of dead tree %s: %w", hm.m.tree, err)
			}
			delete(s.trees, hm.m.tree)
			gone = append(gone, hm)
			s.st.Manifests++
			s.st.Freed += int64(len(hm.raw))
		}
	}
	// A tree may have become live since the first listing, its upload
	// finding the manifest there: put it back.
	alive, err := s.listLive(ctx)
	if err != nil {
		return err // the records stay open: the next sweep puts back what is live
	}
	for t := range alive {
		s.alive[t] = true
	}
	if err := s.restore(ctx, gone); err != nil {
		return err
	}
	for _, h := range mine {
		if err := s.seal(ctx, h); err != nil {
			return err
		}
		// Sealed after t0: held through this sweep whatever the grace.
		h.info.ModTime = s.opts.Now()
	}
	return nil
}

// seal writes h again, sealed.
func (s *sweeper) seal(ctx context.Context, h *hold) error {
	h.sealed = true
	b := h.encode()
	if err := s.store.Put(ctx, h.info.Key, bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("seal hold record %s: %w", h.info.Key, err)
	}
	return nil
}

// sweepPacks deletes the packs neither marked nor held that are older
// than the grace at t0.
func (s *sweeper) sweepPacks(ctx context.Context, marked, held map[snapshot.Hash]bool) error {
	var doomed []Info
	err := s.store.List(ctx, "packs/", func(i Info) error {
		name, err := snapshot.ParseHash(strings.TrimPrefix(i.Key, "packs/"))
		switch {
		case err != nil:
			return nil // not a key this package writes
		case marked[name]:
		case held[name]:
			s.st.Held++
		case s.t0.Sub(i.ModTime) <= s.opts.Grace:
			s.st.Young++
		default:
			doomed = append(doomed, i)
			return nil
		}
		s.st.KeptPacks++
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the packs: %w", err)
	}
	for _, i := range doomed {
		if err := s.store.Delete(ctx, i.Key); err != nil {
			return fmt.Errorf("delete a pack no manifest names: %w", err)
		}
		s.st.Packs++
		s.st.Freed += i.Size
	}
	return nil
}
