package snapshot

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"warren/internal/progress"
)

// Target is where Apply writes: the daemon's workspace, under its locks.
// Paths are relative to the workspace root, "/"-separated, as in Delta.
type Target interface {
	RemoveAll(ctx context.Context, path string) error                                 // a missing path is not an error
	Mkdir(ctx context.Context, path string, mode uint32) error                        // an existing folder is not an error; sets mode
	WriteFile(ctx context.Context, path string, mode uint32, content io.Reader) error // atomic replace; see SparseContent
	Symlink(ctx context.Context, path, target string) error                           // atomic replace
	Chmod(ctx context.Context, path string, mode uint32) error
}

// Apply makes the deltas (as Diff returns them: what makes the
// workspace's tree into another) happen in t, and returns the paths it
// changed, sorted by ComparePaths. The order:
//
//  1. removals, deepest first (a removed folder's RemoveAll covers what
//     was below it, which is not removed on its own); a change of kind
//     is a removal first;
//  2. folders added, parents first, made with 0o700|mode so that the
//     owner can fill them;
//  3. files and links, added or modified (a mode-only change of a file is
//     a Chmod);
//  4. the modes of the folders added or modified, deepest first, so that
//     a read-only folder does not stop its own filling.
//
// Every step replaces or converges: running a plan again after it was
// cut short (a crash, a failed call) ends in the same workspace. Content
// comes from the repository, checked against its hash: a corrupt blob
// or extent map fails its WriteFile (an error matching ErrCorrupt, naming
// the object) and replaces nothing. The content of a sparse file
// implements SparseContent: a Target that uses it makes the holes again.
// Call it holding Shared.
//
// It reports its progress to ctx's progress.Func, if any, as phase
// "write": the steps of the plan done, of all of them.
func (r *Repo) Apply(ctx context.Context, deltas []Delta, t Target) (changed []string, err error) {
	var removes, mkdirs, writes, chmods []Delta
	for _, d := range deltas {
		if d.Path == "" || !validPath(d.Path) {
			return nil, fmt.Errorf("snapshot: apply: bad path %q", d.Path)
		}
		switch {
		case d.Op == Removed:
			removes = append(removes, d)
		case d.Op == Added, d.Op == Modified && d.Old.Kind != d.New.Kind:
			if d.Op == Modified {
				removes = append(removes, Delta{Path: d.Path, Op: Removed, Old: d.Old})
			}
			if d.New.Kind == KindDir {
				mkdirs = append(mkdirs, d)
				chmods = append(chmods, d)
			} else {
				writes = append(writes, d)
			}
		case d.Op == Modified && d.New.Kind == KindDir:
			chmods = append(chmods, d)
		case d.Op == Modified:
			writes = append(writes, d)
		default:
			return nil, fmt.Errorf("snapshot: apply %q: unknown op %v", d.Path, d.Op)
		}
		changed = append(changed, d.Path)
	}
	deepestFirst := func(a, b Delta) int {
		if c := strings.Count(b.Path, "/") - strings.Count(a.Path, "/"); c != 0 {
			return c
		}
		return ComparePaths(a.Path, b.Path)
	}
	slices.SortFunc(removes, deepestFirst)
	slices.SortFunc(mkdirs, func(a, b Delta) int { return ComparePaths(a.Path, b.Path) })
	slices.SortFunc(writes, func(a, b Delta) int { return ComparePaths(a.Path, b.Path) })
	slices.SortFunc(chmods, deepestFirst)

	removedDirs := make(map[string]bool)
	for _, d := range removes {
		if d.Old.Kind == KindDir {
			removedDirs[d.Path] = true
		}
	}
	report := progress.Of(ctx)
	done, total := int64(0), int64(len(removes)+len(mkdirs)+len(writes)+len(chmods))
	step := func() {
		done++
		report(progress.Frame{Done: done, Total: total, Phase: PhaseWrite})
	}
	for _, d := range removes {
		if underAny(d.Path, removedDirs) {
			step()
			continue // removed with its folder
		}
		if err := t.RemoveAll(ctx, d.Path); err != nil {
			return nil, fmt.Errorf("snapshot: apply: remove %q: %w", d.Path, err)
		}
		step()
	}
	for _, d := range mkdirs {
		if err := t.Mkdir(ctx, d.Path, 0o700|d.New.Mode); err != nil {
			return nil, fmt.Errorf("snapshot: apply: make folder %q: %w", d.Path, err)
		}
		step()
	}
	for _, d := range writes {
		if err := r.write(ctx, d, t); err != nil {
			return nil, fmt.Errorf("snapshot: apply: %w", err)
		}
		step()
	}
	for _, d := range chmods {
		if err := t.Chmod(ctx, d.Path, d.New.Mode); err != nil {
			return nil, fmt.Errorf("snapshot: apply: chmod %q: %w", d.Path, err)
		}
		step()
	}
	slices.SortFunc(changed, ComparePaths)
	return slices.Compact(changed), nil
}

// underAny reports whether a folder above path is in folders.
func underAny(path string, folders map[string]bool) bool {
	for i := strings.LastIndexByte(path, '/'); i > 0; i = strings.LastIndexByte(path[:i], '/') {
		if folders[path[:i]] {
			return true
		}
	}
	return false
}

// write makes the file or link of d in t.
func (r *Repo) write(ctx context.Context, d Delta, t Target) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := d.New
	switch {
	case e.Kind == KindLink:
		target, err := r.readBlob(e.Hash, maxLinkSize)
		if err != nil {
			return fmt.Errorf("link %q: %w", d.Path, err)
		}
		if len(target) == 0 || len(target) > maxLinkSize {
			return fmt.Errorf("link %q: %w %s: a target of %d bytes", d.Path, ErrCorrupt, e.Hash, len(target))
		}
		if err := t.Symlink(ctx, d.Path, string(target)); err != nil {
			return fmt.Errorf("link %q: %w", d.Path, err)
		}
	case e.Kind == KindFile && d.Op == Modified && d.Old.Hash == e.Hash && d.Old.Sparse == e.Sparse:
		if err := t.Chmod(ctx, d.Path, e.Mode); err != nil {
			return fmt.Errorf("chmod %q: %w", d.Path, err)
		}
	case e.Kind == KindFile:
		rc, err := r.OpenFile(e)
		if err != nil {
			return fmt.Errorf("write %q: %w", d.Path, err)
		}
		err = t.WriteFile(ctx, d.Path, e.Mode, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("write %q: %w", d.Path, err)
		}
	default:
		return fmt.Errorf("%q: unknown kind %v", d.Path, e.Kind)
	}
	return nil
}

// validPath reports whether p is a clean relative path: valid names
// joined by "/".
func validPath(p string) bool {
	for name := range strings.SplitSeq(p, "/") {
		if !validName(name) {
			return false
		}
	}
	return true
}

// Recorder is a Target that passes every call on to T and notes what the
// calls changed, so that a plan cut short by an error can be taken back
// (Back). A call that failed changed nothing, except a RemoveAll, which
// may have removed part of its tree: it is noted whatever its outcome.
type Recorder struct {
	T Target
	// Failed is the path of the last call that failed, "" if none did.
	Failed string

	changed map[string]bool // paths a call changed
	removed map[string]bool // paths of RemoveAll calls: what was below them may have gone
}

var _ Target = (*Recorder)(nil)

// Record returns a Recorder of t.
func Record(t Target) *Recorder {
	return &Recorder{T: t, changed: make(map[string]bool), removed: make(map[string]bool)}
}

func (r *Recorder) note(path string, err error) error {
	if err != nil {
		r.Failed = path
		return err
	}
	r.changed[path] = true
	return nil
}

// RemoveAll implements Target.
func (r *Recorder) RemoveAll(ctx context.Context, path string) error {
	r.removed[path] = true
	return r.note(path, r.T.RemoveAll(ctx, path))
}

// Mkdir implements Target.
func (r *Recorder) Mkdir(ctx context.Context, path string, mode uint32) error {
	return r.note(path, r.T.Mkdir(ctx, path, mode))
}

// WriteFile implements Target.
func (r *Recorder) WriteFile(ctx context.Context, path string, mode uint32, content io.Reader) error {
	return r.note(path, r.T.WriteFile(ctx, path, mode, content))
}

// Symlink implements Target.
func (r *Recorder) Symlink(ctx context.Context, path, target string) error {
	return r.note(path, r.T.Symlink(ctx, path, target))
}

// Chmod implements Target.
func (r *Recorder) Chmod(ctx context.Context, path string, mode uint32) error {
	return r.note(path, r.T.Chmod(ctx, path, mode))
}

// Back returns the plan that takes back what the recorded calls of a plan
// of deltas changed: the deltas turned round (Added is Removed, Old is
// New), for the paths a call changed or a RemoveAll went over. Applied to
// the workspace as the calls left it, it makes the tree the deltas
// started from again; the paths no call reached are as they were, and
// are left alone.
func (r *Recorder) Back(deltas []Delta) []Delta {
	var back []Delta
	for _, d := range deltas {
		if !r.changed[d.Path] && !r.removed[d.Path] && !underAny(d.Path, r.removed) {
			continue
		}
		b := Delta{Path: d.Path, Old: d.New, New: d.Old}
		switch d.Op {
		case Added:
			b.Op = Removed
		case Removed:
			b.Op = Added
		default:
			b.Op = Modified
		}
		back = append(back, b)
	}
	return back
}
