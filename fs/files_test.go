package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"warren/internal/testenv"
)

// The file API needs no mount: these run anywhere.

func newFiles(t *testing.T, cfg HubConfig) (*Hub, *Files, string) {
	t.Helper()
	hub := NewHub(cfg)
	t.Cleanup(hub.Close)
	dir := t.TempDir()
	f, err := hub.Files(dir, "test/thread", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return hub, f, dir
}

func TestFilesLeadAndSubagent(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	lead, sub := RunActor("lead"), RunActor("lead/sub-1")
	must(t, os.WriteFile(filepath.Join(dir, "app.ts"), []byte("let a = 1\n"), 0o644))

	if _, _, err := f.Read(ctx, lead, "app.ts"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Read(ctx, sub, "app.ts"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Edit(ctx, sub, "app.ts", "a = 1", "a = 2", false); err != nil {
		t.Fatalf("subagent edit: %v", err)
	}
	// The lead read before the subagent's edit: its edit is refused.
	_, _, err := f.Edit(ctx, lead, "app.ts", "let a", "const a", false)
	var stale *StaleError
	if !errors.As(err, &stale) || !errors.Is(err, syscall.ESTALE) {
		t.Fatalf("lead's edit after the subagent's: %v, want a stale error", err)
	}
	if msg := err.Error(); msg != "app.ts changed since it was read. Read it again before you edit it." {
		t.Errorf("message %q", msg)
	}
	if _, err := f.Write(ctx, lead, "app.ts", []byte("lost")); !errors.As(err, &stale) {
		t.Fatalf("lead's write after the subagent's edit: %v", err)
	}
	// The subagent's own edits keep its record current.
	if _, _, err := f.Edit(ctx, sub, "app.ts", "a = 2", "a = 3", false); err != nil {
		t.Fatalf("subagent's second edit: %v", err)
	}
	content, v1, err := f.Read(ctx, lead, "app.ts")
	if err != nil || string(content) != "let a = 3\n" {
		t.Fatalf("read %q, %v", content, err)
	}
	v2, _, err := f.Edit(ctx, lead, "app.ts", "let a", "const a", false)
	if err != nil {
		t.Fatalf("lead's edit after a fresh read: %v", err)
	}
	if v2 <= v1 {
		t.Errorf("version went from %d to %d on an edit", v1, v2)
	}
	// A run that never read the file may write it.
	if _, err := f.Write(ctx, RunActor("other"), "app.ts", []byte("fresh\n")); err != nil {
		t.Fatalf("first write of a run that never read: %v", err)
	}
}

func TestFilesEdit(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	write := func(name, s string) { must(t, os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)) }

	write("many", "x\nx\nx\n")
	_, _, err := f.Edit(ctx, a, "many", "x", "y", false)
	var many *ManyMatchesError
	if !errors.As(err, &many) || many.Count != 3 {
		t.Fatalf("edit of a text found 3 times: %v", err)
	}
	if !strings.Contains(err.Error(), "found 3 times in many") {
		t.Errorf("message %q", err)
	}
	if _, n, err := f.Edit(ctx, a, "many", "x", "y", true); err != nil || n != 3 {
		t.Fatalf("replace all: %d, %v", n, err)
	}
	if got := readString(t, filepath.Join(dir, "many")); got != "y\ny\ny\n" {
		t.Fatalf("after replace all: %q", got)
	}
	var none *NoMatchError
	if _, _, err := f.Edit(ctx, a, "many", "zzz", "q", false); !errors.As(err, &none) || !strings.Contains(err.Error(), "not found in many") {
		t.Fatalf("edit of a missing text: %v", err)
	}

	// A CRLF file with a BOM: the agent's "\n" text matches, and the file
	// keeps its endings and BOM.
	write("win.txt", "\xef\xbb\xbfone\r\ntwo\r\nthree\r\n")
	if _, _, err := f.Edit(ctx, a, "win.txt", "one\ntwo\n", "uno\ndos\n", false); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(dir, "win.txt")); got != "\xef\xbb\xbfuno\r\ndos\r\nthree\r\n" {
		t.Fatalf("CRLF file after edit: %q", got)
	}
	if _, err := f.Write(ctx, a, "win.txt", []byte("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(dir, "win.txt")); got != "\xef\xbb\xbfa\r\nb\r\n" {
		t.Fatalf("CRLF file after write: %q", got)
	}
	// A new file is written as given, its directories made.
	if _, err := f.Write(ctx, a, "new/dir/f.txt", []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, filepath.Join(dir, "new/dir/f.txt")); got != "x\n" {
		t.Fatalf("new file: %q", got)
	}
	if _, _, err := f.Edit(ctx, a, "nothere", "a", "b", false); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("edit of a missing file: %v", err)
	}
}

func TestFilesOutside(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("r")
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(dir, "out")))
	must(t, os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "up")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs")))
	must(t, os.WriteFile(filepath.Join(dir, "real"), []byte("inside"), 0o644))
	must(t, os.Symlink("real", filepath.Join(dir, "alias")))

	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "out/secret", "up", "abs", "x\x00y"} {
		_, _, err := f.Read(ctx, a, p)
		var out *OutsideError
		if !errors.As(err, &out) {
			t.Errorf("read %q: %v, want outside the workspace", p, err)
		} else if !strings.HasSuffix(err.Error(), "is outside the workspace.") {
			t.Errorf("message %q", err)
		}
		if _, err := f.Write(ctx, a, p, []byte("x")); !errors.As(err, &out) {
			t.Errorf("write %q: %v, want outside the workspace", p, err)
		}
	}
	if got := readString(t, filepath.Join(outside, "secret")); got != "s" {
		t.Fatalf("the file outside holds %q", got)
	}
	// A link inside the workspace is followed, and keyed as its target:
	// a read through the link counts for the real file.
	if c, _, err := f.Read(ctx, a, "alias"); err != nil || string(c) != "inside" {
		t.Fatalf("read through an inside link: %q, %v", c, err)
	}
	if _, err := f.Write(ctx, RunActor("b"), "real", []byte("changed")); err != nil {
		t.Fatal(err)
	}
	var stale *StaleError
	if _, err := f.Write(ctx, a, "real", []byte("mine")); !errors.As(err, &stale) {
		t.Fatalf("write of a file read through a link and changed since: %v", err)
	}
}

// TestReadRecordsBounded: one run reading 100k files keeps at most
// MaxReads records, and ending the run drops them.
func TestReadRecordsBounded(t *testing.T) {
	// A developer's -short may leave out this slow test; under CI=true a
	// -short run fails here rather than pass without it.
	if testing.Short() {
		testenv.CannotRun(t, "reads 100k files (-short)")
	}
	ctx := context.Background()
	const files, maxReads = 100_000, DefaultMaxReads
	hub, f, dir := newFiles(t, HubConfig{})
	for d := range files / 1000 {
		sub := filepath.Join(dir, strconv.Itoa(d))
		must(t, os.Mkdir(sub, 0o755))
		for i := range 1000 {
			must(t, os.WriteFile(filepath.Join(sub, strconv.Itoa(i)), nil, 0o644))
		}
	}
	a := RunActor("reader")
	for d := range files / 1000 {
		for i := range 1000 {
			if _, _, err := f.Read(ctx, a, strconv.Itoa(d)+"/"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := hub.ReadStats()
	t.Logf("after %d reads: %d records, %d path states", files, st.Records, st.Paths)
	// Path states: those with records, and as many idle ones kept.
	if st.Records > maxReads || st.Paths > 2*maxReads {
		t.Fatalf("%d records and %d path states after %d reads; bound %d and %d", st.Records, st.Paths, files, maxReads, 2*maxReads)
	}
	// The newest reads are the ones kept.
	if _, err := f.Write(ctx, RunActor("other"), "99/999", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, a, "99/999", []byte("y")); err == nil {
		t.Fatal("the newest read was not kept")
	}
	hub.EndRun("reader")
	hub.EndRun("other")
	if st := hub.ReadStats(); st.Records != 0 || st.Paths > maxReads {
		t.Fatalf("after the runs ended: %+v", st)
	}
}

// TestReusedFolderInode: a folder removed and made again gets the old one's
// inode number at once on ext4; its files are new files all the same, and
// an actor's read or write of the old ones says nothing about them.
func TestReusedFolderInode(t *testing.T) {
	ctx := context.Background()
	_, f, dir := newFiles(t, HubConfig{})
	a := RunActor("a")
	reused := false
	for try := 0; try < 50 && !reused; try++ {
		must(t, os.Mkdir(filepath.Join(dir, "old"), 0o755))
		if _, err := f.Write(ctx, a, "old/x", []byte("mine\n")); err != nil {
			t.Fatal(err)
		}
		var before, after syscall.Stat_t
		must(t, syscall.Stat(filepath.Join(dir, "old"), &before))
		// Removed and made again behind the filesystem's back, a
		// file of the same name written there by someone else.
		must(t, os.RemoveAll(filepath.Join(dir, "old")))
		must(t, os.Mkdir(filepath.Join(dir, "new"), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "new", "x"), []byte("theirs\n"), 0o644))
		must(t, syscall.Stat(filepath.Join(dir, "new"), &after))
		reused = before.Ino == after.Ino
		if _, err := f.Write(ctx, a, "new/x", []byte("mine again\n")); err != nil {
			t.Fatalf("try %d (inode reused: %v): a first write of a file in a new folder: %v", try, reused, err)
		}
		must(t, os.RemoveAll(filepath.Join(dir, "new")))
	}
	if !reused {
		t.Fatalf("the filesystem of %s never gave a removed folder's inode to the next one; the test proves nothing there", dir)
	}
}
