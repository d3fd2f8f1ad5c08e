package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"warren/internal/testenv"
)

// fillDisk fills the filesystem of dir, as root (so ext4's root reserve
// goes too), with one file it returns: fallocate in halving chunks, then
// single blocks written, until the disk refuses even those.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var off int64
	for chunk := int64(1 << 30); chunk >= 4096; {
		err := unix.Fallocate(int(f.Fd()), 0, off, chunk)
		if err == nil {
			off += chunk
			continue
		}
		if !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("fill %s: fallocate: %v", path, err)
		}
		chunk /= 2
	}
	block := make([]byte, 4096)
	for {
		if _, err := f.WriteAt(block, off); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill %s: write: %v", path, err)
			}
			break
		}
		off += 4096
	}
	f.Sync()
	return path
}

// alive fails the test if the daemon has exited.
func (d *daemon) alive() {
	d.t.Helper()
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	select {
	case <-done:
		d.t.Fatalf("warren serve died:\n%s", d.allLogs())
	default:
	}
}

// TestStoreSurvivesFullDisk fills the disk of the daemon's metadata store
// (a small ext4 of the test's own) as root, which takes ext4's root
// reserve too. The daemon must stay up and answer: reads work, writes to
// the store are refused with a clear "no space" error (Badger's memtable
// is an mmap'd file; a write to it on a full disk is a SIGBUS), also after
// a restart on the full disk; once space is back, writes work again.
func TestStoreSurvivesFullDisk(t *testing.T) {
	mnt := testenv.LoopFS(t, 96<<20, "mkfs.ext4", []string{"-q"}, "")
	d := newDaemonAt(t, filepath.Join(mnt, "data"))
	a := d.bind("default", "a")
	must(t, os.WriteFile(filepath.Join(a, "kept.txt"), []byte("kept"), 0o644))

	filler := fillDisk(t, mnt)
	for i := range 20 {
		// A new thread (a folder, then a record) and new settings of a
		// bound one (a record only).
		_, err := d.warren("bind", "--thread", fmt.Sprintf("b%d", i))
		if err == nil || !strings.Contains(err.Error(), "no space") {
			t.Fatalf("bind b%d on a full disk: %v; want an error that says no space", i, err)
		}
		_, err = d.warren("bind", "--thread", "a", "--max-jobs", fmt.Sprint(i%4+2))
		if err == nil || !strings.Contains(err.Error(), "no space") {
			t.Fatalf("new settings of a on a full disk: %v; want an error that says no space", err)
		}
		d.alive()
	}
	if out := d.mustWarren("ls"); !strings.Contains(out, "a ") {
		t.Fatalf("ls on a full disk: %q lacks thread a", out)
	}

	// A restart on the full disk: the daemon starts, serves what it had,
	// and refuses writes the same way.
	d.stop()
	d.start()
	if out := d.mustWarren("ls"); !strings.Contains(out, "a ") {
		t.Fatalf("ls after a restart on a full disk: %q lacks thread a", out)
	}
	if got, err := os.ReadFile(filepath.Join(a, "kept.txt")); err != nil || string(got) != "kept" {
		t.Fatalf("read kept.txt after a restart on a full disk: %q, %v", got, err)
	}
	if _, err := d.warren("bind", "--thread", "c"); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("bind after a restart on a full disk: %v; want an error that says no space", err)
	}
	if _, err := d.warren("bind", "--thread", "a", "--max-jobs", "7"); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("new settings of a after a restart on a full disk: %v; want an error that says no space", err)
	}
	d.alive()

	// Space is back: writes work again, without a restart.
	must(t, os.Remove(filler))
	syscall.Sync()
	d.mustWarren("bind", "--thread", "a", "--max-jobs", "7")
	c := d.bind("default", "c")
	must(t, os.WriteFile(filepath.Join(c, "new.txt"), []byte("new"), 0o644))
	d.alive()
}
