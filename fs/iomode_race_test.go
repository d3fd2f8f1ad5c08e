package fs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

// flipOpens reads path and then truncates and writes it, times times,
// the way a read-modify-write loop does, so its opens alternate between
// read-only and writing. It prints how many opens failed with EIO (and
// with ESTALE, which an edit check may answer); any other error ends it.
func flipOpens(path, times string) error {
	m, err := strconv.Atoi(times)
	if err != nil {
		return err
	}
	eio, stale := 0, 0
	failed := func(err error) error {
		switch {
		case errors.Is(err, syscall.EIO):
			eio++
			return nil
		case errors.Is(err, syscall.ESTALE):
			stale++
			return nil
		}
		return err
	}
	for i := range m {
		if _, err := os.ReadFile(path); err != nil {
			if err := failed(err); err != nil {
				return err
			}
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			if err := failed(err); err != nil {
				return err
			}
			continue
		}
		_, werr := f.WriteString(strconv.Itoa(i))
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return werr
		}
	}
	fmt.Printf("eio %d stale %d\n", eio, stale)
	return nil
}

var flipReport = regexp.MustCompile(`eio (\d+) stale (\d+)`)

// TestAlternatingOpensNoEIO has processes alternate read-only and writing
// opens of small files, through two mounts of one folder, and counts the
// opens the kernel refused with EIO because the daemon answered one in a
// mode (or with a backing file) other than the inode's other opens (see
// iomode.go). Two files are flipped at once: each node's passthrough
// opens register and drop backing ids under one lock of go-fuse per mount,
// which delays the other's releases, the window in which the modes used to
// get out of step. One file is made through a mount, the other put in the
// backing folder, so both ways a node first opens are covered.
func TestAlternatingOpensNoEIO(t *testing.T) {
	const rounds = 600
	_, backing, a, b, _ := sharedMountsWith(t, HubConfig{NoEditChecks: true}, Options{})
	must(t, os.WriteFile(filepath.Join(a, "made"), []byte("0"), 0o666))
	must(t, os.WriteFile(filepath.Join(backing, "found"), []byte("0"), 0o666))
	var cmds []*exec.Cmd
	var outs []fmt.Stringer
	for _, name := range []string{"made", "found"} {
		for _, mnt := range []string{a, a, b} {
			cmd, out, err := startChild("flip-opens", filepath.Join(mnt, name), strconv.Itoa(rounds))
			if err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
	}
	eio, stale := 0, 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		m := flipReport.FindStringSubmatch(outs[i].String())
		if m == nil {
			t.Fatalf("child %d printed no counts:\n%s", i, outs[i])
		}
		e, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		eio, stale = eio+e, stale+s
	}
	t.Logf("%d processes × %d rounds: %d opens failed with EIO, %d with ESTALE", len(cmds), rounds, eio, stale)
	if eio > 0 {
		t.Errorf("%d opens failed with EIO", eio)
	}
}
