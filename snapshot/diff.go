package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// Op is what a Delta does to its path.
type Op uint8

const (
	Added    Op = 1 + iota // New is there, Old is not
	Removed                // Old is there, New is not
	Modified               // both are there, of one kind; content, target or mode differ
)

func (o Op) String() string {
	switch o {
	case Added:
		return "added"
	case Removed:
		return "removed"
	case Modified:
		return "modified"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Delta is one change between two trees.
type Delta struct {
	Path     string // "/"-separated, relative to the root
	Op       Op
	Old, New Entry // the zero Entry where there is none; Name is the last element of Path
}

// ComparePaths orders paths as Diff sorts them: element by element, each
// in byte order, so that a folder comes right before what it holds.
func ComparePaths(a, b string) int {
	for {
		ai, bi := strings.IndexByte(a, '/'), strings.IndexByte(b, '/')
		ae, be := a, b
		if ai >= 0 {
			ae = a[:ai]
		}
		if bi >= 0 {
			be = b[:bi]
		}
		if c := strings.Compare(ae, be); c != 0 {
			return c
		}
		switch {
		case ai < 0 && bi < 0:
			return 0
		case ai < 0:
			return -1
		case bi < 0:
			return 1
		}
		a, b = a[ai+1:], b[bi+1:]
	}
}

// Diff returns what makes tree a into tree b, sorted by path
// (ComparePaths); for one path, a Removed comes before an Added. A zero
// Hash is the empty tree. It reads only the folders whose hashes differ.
//
// An added or removed folder is listed, and so is everything below it. A
// change of kind (a file that became a folder or a link...) is a Removed
// of the old entry then an Added of the new one, so that a Modified is
// always of one kind. A folder present on both sides is listed (Modified)
// only where its mode changed; a change below it lists what changed, not
// the folder.
func (r *Repo) Diff(ctx context.Context, a, b Hash) ([]Delta, error) {
	if a == b {
		return nil, nil
	}
	var out []Delta
	if err := r.diffTrees(ctx, "", a, b, &out); err != nil {
		return nil, fmt.Errorf("snapshot: diff: %w", err)
	}
	return out, nil
}

// diffTrees appends to out the deltas between the trees a and b of the
// folder at rel, in order.
func (r *Repo) diffTrees(ctx context.Context, rel string, a, b Hash, out *[]Delta) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ta, err := r.tree(a)
	if err != nil {
		return fmt.Errorf("read %q: %w", rel, err)
	}
	tb, err := r.tree(b)
	if err != nil {
		return fmt.Errorf("read %q: %w", rel, err)
	}
	ea, eb := ta.entries, tb.entries
	for len(ea) > 0 || len(eb) > 0 {
		switch {
		case len(eb) == 0 || len(ea) > 0 && ea[0].Name < eb[0].Name:
			if err := r.listAll(ctx, join(rel, ea[0].Name), ea[0], Removed, out); err != nil {
				return err
			}
			ea = ea[1:]
		case len(ea) == 0 || eb[0].Name < ea[0].Name:
			if err := r.listAll(ctx, join(rel, eb[0].Name), eb[0], Added, out); err != nil {
				return err
			}
			eb = eb[1:]
		default:
			if err := r.diffEntries(ctx, join(rel, ea[0].Name), ea[0], eb[0], out); err != nil {
				return err
			}
			ea, eb = ea[1:], eb[1:]
		}
	}
	return nil
}

// diffEntries appends the deltas between two entries of one path.
func (r *Repo) diffEntries(ctx context.Context, path string, a, b Entry, out *[]Delta) error {
	if a == b {
		return nil
	}
	if a.Kind != b.Kind {
		// Removed, then Added: the old entry's subtree (listed after its
		// folder) sorts after the new entry, so gather and sort.
		var d []Delta
		if err := r.listAll(ctx, path, a, Removed, &d); err != nil {
			return err
		}
		if err := r.listAll(ctx, path, b, Added, &d); err != nil {
			return err
		}
		slices.SortStableFunc(d, func(x, y Delta) int { return ComparePaths(x.Path, y.Path) })
		*out = append(*out, d...)
		return nil
	}
	if a.Kind != KindDir || a.Mode != b.Mode {
		*out = append(*out, Delta{Path: path, Op: Modified, Old: a, New: b})
	}
	if a.Kind == KindDir && a.Hash != b.Hash {
		return r.diffTrees(ctx, path, a.Hash, b.Hash, out)
	}
	return nil
}

// listAll appends a delta op for e at path and, for a folder, for
// everything below it.
func (r *Repo) listAll(ctx context.Context, path string, e Entry, op Op, out *[]Delta) error {
	d := Delta{Path: path, Op: op}
	if op == Added {
		d.New = e
	} else {
		d.Old = e
	}
	*out = append(*out, d)
	if e.Kind != KindDir {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := r.tree(e.Hash)
	if err != nil {
		return fmt.Errorf("read %q: %w", path, err)
	}
	for _, c := range t.entries {
		if err := r.listAll(ctx, join(path, c.Name), c, op, out); err != nil {
			return err
		}
	}
	return nil
}

// maxTextDiff is the largest file TextDiff compares.
const maxTextDiff = 1 << 20

// TextDiff returns a unified diff (with contextLines lines of context) of
// the file d changes: both sides of a Modified, against nothing for an
// Added or a Removed. It returns false, and no diff, where a side is not a
// file, is over 1 MiB, or is not text (holds a NUL byte or invalid
// UTF-8). A last line without a newline is marked as diff marks it.
func (r *Repo) TextDiff(ctx context.Context, d Delta, contextLines int) (string, bool, error) {
	sides := [2]Entry{d.Old, d.New}
	var text [2][]string
	for i, e := range sides {
		if e == (Entry{}) {
			continue
		}
		if e.Kind != KindFile || e.Size > maxTextDiff {
			return "", false, nil
		}
		if err := ctx.Err(); err != nil {
			return "", false, err
		}
		data, err := r.readFile(e)
		if err != nil {
			return "", false, fmt.Errorf("snapshot: text diff of %q: %w", d.Path, err)
		}
		if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
			return "", false, nil
		}
		text[i] = splitLines(string(data))
	}
	if sides[0] == (Entry{}) && sides[1] == (Entry{}) {
		return "", false, nil
	}
	ud := difflib.UnifiedDiff{
		A:        text[0],
		B:        text[1],
		FromFile: "a/" + d.Path,
		ToFile:   "b/" + d.Path,
		Context:  contextLines,
	}
	if d.Old == (Entry{}) {
		ud.FromFile = "/dev/null"
	}
	if d.New == (Entry{}) {
		ud.ToFile = "/dev/null"
	}
	s, err := difflib.GetUnifiedDiffString(ud)
	if err != nil {
		return "", false, fmt.Errorf("snapshot: text diff of %q: %w", d.Path, err)
	}
	return s, true, nil
}

// splitLines splits s after each newline; a last line without one gets
// one, and diff's marker for its absence.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		return lines[:len(lines)-1]
	}
	lines[len(lines)-1] += "\n\\ No newline at end of file\n"
	return lines
}

// readBlob reads the blob h whole, checked, or its first max+1 bytes
// (unchecked) where it is longer than max.
func (r *Repo) readBlob(h Hash, max int64) ([]byte, error) {
	rc, err := r.OpenBlob(h)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, max+1))
}

// readFile reads the file entry e whole, checked: its content must end
// at its entry's size and match its hash.
func (r *Repo) readFile(e Entry) ([]byte, error) {
	rc, err := r.OpenFile(e)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// One byte more than the size: the read meets the end, which checks
	// the hash.
	data, err := io.ReadAll(io.LimitReader(rc, e.Size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != e.Size {
		return nil, fmt.Errorf("%w %s: %d bytes or more for a file of %d", ErrCorrupt, e.Hash, len(data), e.Size)
	}
	return data, nil
}
