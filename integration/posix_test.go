package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPosixInJail: the POSIX behaviour of a thread's mount that tools rely
// on, seen with plain tools by a command in the thread's jail (uid
// nobody) on a real daemon, with folders and files made by root on the
// host with umask 000, as a conformance run makes them.
func TestPosixInJail(t *testing.T) {
	d := newDaemon(t)
	mnt := d.bind("default", "posix")
	// Root on the host, in a shell of its own with umask 000 (the daemon
	// keeps its own, 022).
	host := func(line string) {
		t.Helper()
		cmd := exec.Command("sh", "-ec", "umask 000\n"+line)
		cmd.Dir = mnt
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("on the host: %q: %v: %s", line, err, out)
		}
	}
	jail := func(line string) (int, string) {
		t.Helper()
		return d.execIn("posix", "cd /workspace\n"+line)
	}
	host(`mkdir a b s && chmod 1777 s && touch a/f s/g
perl -MFcntl -e 'sysopen(my $f, "setid", O_CREAT|O_WRONLY, 06777) or die "$!\n"'`)

	t.Run("create modes", func(t *testing.T) {
		code, out := jail(`umask 000 && touch m1 && mkdir m2
umask 002 && touch m3 && mkdir m4
perl -MFcntl -e 'sysopen(my $f, "m5", O_CREAT|O_WRONLY, 0) or die "$!\n"'
stat -c '%n %a %U' m1 m2 m3 m4 m5`)
		want := "m1 666 nobody\nm2 777 nobody\nm3 664 nobody\nm4 775 nobody\nm5 0 nobody\n"
		if code != 0 || out != want {
			t.Errorf("modes in the jail: exit %d\n%s\nwant\n%s", code, out, want)
		}
		if code, out := jail("umask 000 && touch m6 && echo made"); code != 0 || !strings.Contains(out, "made") {
			t.Fatalf("touch: exit %d %q", code, out)
		}
		if st, err := os.Stat(filepath.Join(mnt, "m6")); err != nil || st.Mode().Perm() != 0o666 {
			t.Errorf("m6 from the host: %v %v, want -rw-rw-rw-", st.Mode(), err)
		}
	})

	t.Run("long names", func(t *testing.T) {
		long := strings.Repeat("n", 256)
		for _, line := range []string{
			"touch " + long,
			"mkdir " + long,
			"mkfifo " + long,
			"ln -s a " + long,
			"touch l && ln l " + long,
			"touch r && mv r " + long,
			"ls " + long,
		} {
			code, out := jail(line)
			if code == 0 || !strings.Contains(out, "File name too long") {
				short := func(s string) string { return strings.ReplaceAll(s, long, "<256 bytes>") }
				t.Errorf("%s: exit %d, %q; want File name too long", short(line), code, short(out))
			}
		}
	})

	t.Run("write to a set-id file", func(t *testing.T) {
		code, out := jail("echo more >> setid && stat -c %a setid")
		if code != 0 || out != "777\n" {
			t.Errorf("write to a 6777 file of root's: exit %d, %q; want 777 (written, set-id bits cleared)", code, out)
		}
	})

	t.Run("rename by another user", func(t *testing.T) {
		if code, out := jail("mv a/f b/f && stat -c %U b/f"); code != 0 || out != "root\n" {
			t.Errorf("mv of root's file between world-writable folders: exit %d, %q", code, out)
		}
		// With the sticky bit, only the file's or the folder's owner may.
		if code, out := jail("mv s/g b/g"); code == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("mv of root's file out of a sticky folder: exit %d, %q; want Operation not permitted", code, out)
		}
		if code, out := jail("rm -f s/g"); code == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("rm of root's file in a sticky folder: exit %d, %q; want Operation not permitted", code, out)
		}
		if _, err := os.Stat(filepath.Join(mnt, "s", "g")); err != nil {
			t.Errorf("s/g after the refusals: %v", err)
		}
	})
}
