package fs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests of this file run each operation in a process of its own, as
// another user and with its own umask, the way a command in a jail calls
// the mount: the serving process (this test binary) keeps the daemon's
// umask and stays root.

// nobody is the unprivileged user the tests act as.
const nobody = 65534

// callerOp is the child helper that makes one system call: it sets its
// umask, runs op on its arguments and prints "ok" or the errno's number.
func callerOp(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("caller-op: want umask op args..., got %q", args)
	}
	mask, err := strconv.ParseUint(args[0], 8, 32)
	if err != nil {
		return err
	}
	unix.Umask(int(mask))
	op, a := args[1], args[2:]
	mode := func(s string) uint32 {
		m, err := strconv.ParseUint(s, 8, 32)
		if err != nil {
			panic(err)
		}
		return uint32(m)
	}
	switch op {
	case "create":
		var fd int
		if fd, err = unix.Open(a[0], unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, mode(a[1])); err == nil {
			unix.Close(fd)
		}
	case "tmpfile":
		// Prints the mode the unnamed file got.
		var fd int
		if fd, err = unix.Open(a[0], unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, mode(a[1])); err == nil {
			var st unix.Stat_t
			err = unix.Fstat(fd, &st)
			unix.Close(fd)
			if err == nil {
				fmt.Printf("ok %o\n", st.Mode&07777)
				return nil
			}
		}
	case "mkdir":
		err = unix.Mkdir(a[0], mode(a[1]))
	case "mkfifo":
		err = unix.Mkfifo(a[0], mode(a[1]))
	case "write":
		var fd int
		if fd, err = unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			_, err = unix.Write(fd, []byte("written by another user\n"))
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
	case "open-trunc":
		var fd int
		if fd, err = unix.Open(a[0], unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0); err == nil {
			err = unix.Close(fd)
		}
	case "truncate":
		err = unix.Truncate(a[0], 3)
	case "rename":
		err = unix.Rename(a[0], a[1])
	case "unlink":
		err = unix.Unlink(a[0])
	case "lstat":
		var st unix.Stat_t
		err = unix.Lstat(a[0], &st)
	default:
		return fmt.Errorf("caller-op: unknown op %q", op)
	}
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			return err
		}
		fmt.Println(int(errno))
		return nil
	}
	fmt.Println("ok")
	return nil
}

// asUser runs system calls on a mount as another user, each in a fresh
// process of its own.
type asUser struct {
	t   testing.TB
	bin string // a copy of the test binary that uid may execute
	uid int
}

// newCaller copies the test binary where uid may execute it (the build
// folder is root's alone); the copy goes with the test.
func newCaller(t testing.TB, uid int) *asUser {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	openToAll(t, dir)
	bin := filepath.Join(dir, "caller")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return &asUser{t: t, bin: bin, uid: uid}
}

// do runs op with umask mask and returns its errno (0 for success) and
// what it printed after "ok".
func (c *asUser) do(mask uint32, op string, args ...string) (syscall.Errno, string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, append([]string{"-test.run=^$", fmt.Sprintf("%o", mask), op}, args...)...)
	cmd.Env = []string{childEnv + "=caller-op"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.uid)}}
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("%s %q as uid %d: %v (%s)", op, args, c.uid, err, out)
	}
	line := strings.TrimSpace(string(out))
	if rest, ok := strings.CutPrefix(line, "ok"); ok {
		return 0, strings.TrimSpace(rest)
	}
	n, err := strconv.Atoi(line)
	if err != nil {
		c.t.Fatalf("%s %q as uid %d printed %q", op, args, c.uid, line)
	}
	return syscall.Errno(n), ""
}

// openToAll lets every user through dir and its parent, the two folders
// t.TempDir makes for root alone.
func openToAll(t testing.TB, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// mountShared is mountTemp with a mount point every user can reach, served
// by a process with the daemon's umask (022), as warren serve runs.
func mountShared(t testing.TB, opts Options) (backing, mnt string) {
	t.Helper()
	old := unix.Umask(0o022)
	t.Cleanup(func() { unix.Umask(old) })
	backing, mnt = mountTemp(t, opts)
	openToAll(t, filepath.Dir(backing))
	return backing, mnt
}

// servingModes are the two ways a mount serves file data.
var servingModes = []struct {
	name string
	opts Options
}{
	{"passthrough", Options{}},
	{"served", Options{NoPassthrough: true}},
}

func statMode(t testing.TB, path string) (mode uint32, uid uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 07777, st.Uid
}

// TestCreateModeIsCallers: a new entry gets the mode its creator asked for
// with the creator's umask taken off, nothing more: the daemon's own umask
// is not applied again. Checked in the mount and in the backing folder.
func TestCreateModeIsCallers(t *testing.T) {
	backing, mnt := mountShared(t, Options{})
	must(t, os.Chmod(mnt, 0o777))
	c := newCaller(t, nobody)
	cases := []struct {
		op   string
		mode uint32
	}{
		{"create", 0o666},
		{"create", 0o777},
		{"create", 0},
		{"create", 0o4755},
		{"mkdir", 0o777},
		{"mkdir", 0o1777},
		{"mkfifo", 0o666},
	}
	for _, mask := range []uint32{0, 0o002, 0o022, 0o077} {
		for _, tc := range cases {
			name := fmt.Sprintf("%s-%04o-umask-%03o", tc.op, tc.mode, mask)
			t.Run(name, func(t *testing.T) {
				if errno, _ := c.do(mask, tc.op, filepath.Join(mnt, name), fmt.Sprintf("%o", tc.mode)); errno != 0 {
					t.Fatalf("%s: %v", tc.op, errno)
				}
				want := tc.mode &^ mask
				for _, p := range []string{filepath.Join(mnt, name), filepath.Join(backing, name)} {
					if got, uid := statMode(t, p); got != want || uid != nobody {
						t.Errorf("%s: mode %04o owner %d, want %04o owner %d", p, got, uid, want, nobody)
					}
				}
			})
		}
	}
	t.Run("in a set-gid folder", func(t *testing.T) {
		// Entries take the folder's group, and folders stay set-gid.
		sg := filepath.Join(mnt, "setgid")
		must(t, os.Mkdir(sg, 0o755))
		must(t, os.Chown(sg, 0, nobody-1))
		must(t, unix.Chmod(sg, 0o2777))
		for _, tc := range []struct {
			op   string
			mode uint32
			want uint32
		}{{"create", 0o666, 0o666}, {"mkdir", 0o777, 0o2777}} {
			p := filepath.Join(sg, tc.op)
			if errno, _ := c.do(0, tc.op, p, fmt.Sprintf("%o", tc.mode)); errno != 0 {
				t.Fatalf("%s: %v", tc.op, errno)
			}
			var st unix.Stat_t
			must(t, unix.Lstat(p, &st))
			if st.Mode&07777 != tc.want || st.Uid != nobody || st.Gid != nobody-1 {
				t.Errorf("%s: mode %04o owner %d:%d, want %04o owner %d:%d", p, st.Mode&07777, st.Uid, st.Gid, tc.want, nobody, nobody-1)
			}
		}
	})
	t.Run("tmpfile", func(t *testing.T) {
		for _, mask := range []uint32{0, 0o022} {
			errno, got := c.do(mask, "tmpfile", mnt, "640")
			if errno != 0 {
				t.Fatalf("O_TMPFILE: %v", errno)
			}
			if want := fmt.Sprintf("%o", 0o640&^mask); got != want {
				t.Errorf("O_TMPFILE with mode 0640, umask %03o: mode %s, want %s", mask, got, want)
			}
		}
	})
}

// TestCreateFindsFile: a CREATE that finds the name taken (the kernel's
// entry for it was a stale "missing": the file was made beside the mount)
// opens the file only if the caller may, and leaves its owner and mode
// alone.
func TestCreateFindsFile(t *testing.T) {
	// The kernel keeps "missing" for the whole test.
	backing, mnt := mountShared(t, Options{NegativeTimeout: time.Hour})
	must(t, os.Chmod(mnt, 0o777))
	c := newCaller(t, nobody)
	for _, tc := range []struct {
		name string
		mode uint32
		want syscall.Errno
	}{
		{"private", 0o600, syscall.EACCES},
		{"read-only", 0o644, syscall.EACCES},
		{"shared", 0o666, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(mnt, tc.name)
			if errno, _ := c.do(0, "lstat", p); errno != syscall.ENOENT {
				t.Fatalf("lstat before: %v, want ENOENT", errno)
			}
			// Made behind the mount's back, by root.
			must(t, os.WriteFile(filepath.Join(backing, tc.name), []byte("root's\n"), 0o600))
			must(t, unix.Chmod(filepath.Join(backing, tc.name), tc.mode))
			if errno, _ := c.do(0, "create", p, "666"); errno != tc.want {
				t.Errorf("open(O_CREAT|O_WRONLY) of root's %04o file as uid %d: %v, want %v", tc.mode, nobody, errno, tc.want)
			}
			if mode, uid := statMode(t, filepath.Join(backing, tc.name)); mode != tc.mode || uid != 0 {
				t.Errorf("after: mode %04o owner %d, want %04o owner 0", mode, uid, tc.mode)
			}
		})
	}
}

// TestLongNames: a name longer than 255 bytes is refused with
// ENAMETOOLONG ("File name too long") by every operation that takes one,
// as on a local filesystem; a name of exactly 255 bytes works.
func TestLongNames(t *testing.T) {
	_, mnt := mountTemp(t, Options{})
	long := strings.Repeat("n", 256)
	max := strings.Repeat("m", 255)
	existing := filepath.Join(mnt, "existing")
	must(t, os.WriteFile(existing, []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(mnt, "sub"), 0o755))

	t.Run("255 bytes", func(t *testing.T) {
		p := filepath.Join(mnt, max)
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
		must(t, os.Rename(p, filepath.Join(mnt, "sub", max)))
	})
	for _, tc := range []struct {
		op string
		do func(p string) error
	}{
		{"lookup", func(p string) error { var st unix.Stat_t; return unix.Lstat(p, &st) }},
		{"create", func(p string) error {
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"mkdir", func(p string) error { return unix.Mkdir(p, 0o755) }},
		{"mkfifo", func(p string) error { return unix.Mkfifo(p, 0o644) }},
		{"symlink", func(p string) error { return unix.Symlink("existing", p) }},
		{"link", func(p string) error { return unix.Link(existing, p) }},
		{"rename", func(p string) error { return unix.Rename(existing, p) }},
		{"rename from", func(p string) error { return unix.Rename(p, existing) }},
		{"unlink", func(p string) error { return unix.Unlink(p) }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			for _, p := range []string{filepath.Join(mnt, long), filepath.Join(mnt, "sub", long)} {
				if err := tc.do(p); err != unix.ENAMETOOLONG {
					t.Errorf("%s of a %d-byte name: %v, want %v", tc.op, len(long), err, unix.ENAMETOOLONG)
				}
			}
		})
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("the source of the refused renames: %v", err)
	}
}

// TestSetIDWriteByOther: another user may write to a world-writable
// set-uid or set-gid file; the write succeeds and clears the bits, as on
// a local filesystem, so nobody can plant content in a set-id program.
// Root (CAP_FSETID) keeps them.
func TestSetIDWriteByOther(t *testing.T) {
	for _, sm := range servingModes {
		t.Run(sm.name, func(t *testing.T) {
			backing, mnt := mountShared(t, sm.opts)
			c := newCaller(t, nobody)
			for _, tc := range []struct {
				op   string
				mode uint32
				want uint32 // the mode after the operation
			}{
				{"write", 0o6777, 0o777},
				{"write", 0o4777, 0o777},
				{"write", 0o2777, 0o777},
				{"write", 0o2767, 0o2767}, // set-gid without group execute: a locking mark, kept
				{"open-trunc", 0o6777, 0o777},
				{"truncate", 0o6777, 0o777},
			} {
				name := fmt.Sprintf("%s-%04o", tc.op, tc.mode)
				t.Run(name, func(t *testing.T) {
					p := filepath.Join(mnt, name)
					must(t, os.WriteFile(p, []byte("root's program\n"), 0o644))
					must(t, unix.Chmod(p, tc.mode))
					if errno, _ := c.do(0o022, tc.op, p); errno != 0 {
						t.Fatalf("%s as uid %d: %v", tc.op, nobody, errno)
					}
					for _, q := range []string{p, filepath.Join(backing, name)} {
						if got, _ := statMode(t, q); got != tc.want {
							t.Errorf("%s after %s by uid %d: mode %04o, want %04o", q, tc.op, nobody, got, tc.want)
						}
					}
				})
			}
			t.Run("made by another user", func(t *testing.T) {
				// As a conformance run makes it: open(O_CREAT, 06777)
				// with umask 000 by its owner.
				must(t, os.Chmod(mnt, 0o777))
				p := filepath.Join(mnt, "made-by-owner")
				if errno, _ := newCaller(t, nobody-1).do(0, "create", p, "6777"); errno != 0 {
					t.Fatalf("create as uid %d: %v", nobody-1, errno)
				}
				if errno, _ := c.do(0o022, "write", p); errno != 0 {
					t.Fatalf("write as uid %d: %v", nobody, errno)
				}
				if got, _ := statMode(t, p); got != 0o777 {
					t.Errorf("after a write by uid %d: mode %04o, want 0777", nobody, got)
				}
			})
			t.Run("by root", func(t *testing.T) {
				p := filepath.Join(mnt, "root-writes")
				must(t, os.WriteFile(p, []byte("root's program\n"), 0o644))
				must(t, unix.Chmod(p, 0o6777))
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				must(t, err)
				_, err = f.WriteString("more\n")
				must(t, err)
				must(t, f.Close())
				if got, _ := statMode(t, p); got != 0o6777 {
					t.Errorf("after a write by root: mode %04o, want 6777", got)
				}
			})
		})
	}
}

// TestRenameByOther: in folders without the sticky bit, write and search
// permission on both folders is all a rename takes, whoever owns the file;
// in a sticky folder only the file's or the folder's owner may rename or
// remove it. The folders and files are made by another user with umask
// 000, as a conformance run makes them.
func TestRenameByOther(t *testing.T) {
	backing, mnt := mountShared(t, Options{})
	must(t, os.Chmod(mnt, 0o777))
	owner, other := newCaller(t, nobody-1), newCaller(t, nobody)
	at := func(name string) string { return filepath.Join(mnt, name) }
	for _, d := range []struct{ name, mode string }{{"a", "777"}, {"b", "777"}, {"sticky", "1777"}} {
		if errno, _ := owner.do(0, "mkdir", at(d.name), d.mode); errno != 0 {
			t.Fatalf("mkdir %s %s as uid %d: %v", d.name, d.mode, nobody-1, errno)
		}
	}
	ownersFile := func(name string) string {
		if errno, _ := owner.do(0, "create", at(name), "644"); errno != 0 {
			t.Fatalf("create %s as uid %d: %v", name, nobody-1, errno)
		}
		return at(name)
	}

	t.Run("between folders", func(t *testing.T) {
		src := ownersFile("a/f1")
		if errno, _ := other.do(0o022, "rename", src, at("b/f1")); errno != 0 {
			t.Fatalf("rename a/f1 b/f1 as uid %d: %v", nobody, errno)
		}
		if _, err := os.Stat(filepath.Join(backing, "b/f1")); err != nil {
			t.Errorf("after the rename: %v", err)
		}
		if _, uid := statMode(t, at("b/f1")); uid != nobody-1 {
			t.Errorf("the renamed file's owner is %d, want %d (a rename keeps the owner)", uid, nobody-1)
		}
	})
	t.Run("in one folder", func(t *testing.T) {
		src := ownersFile("a/f2")
		if errno, _ := other.do(0o022, "rename", src, at("a/f2-renamed")); errno != 0 {
			t.Fatalf("rename a/f2 a/f2-renamed as uid %d: %v", nobody, errno)
		}
	})
	t.Run("over another's file", func(t *testing.T) {
		src := ownersFile("a/f3")
		ownersFile("b/f3")
		if errno, _ := other.do(0o022, "rename", src, at("b/f3")); errno != 0 {
			t.Fatalf("rename a/f3 over b/f3 as uid %d: %v", nobody, errno)
		}
	})
	t.Run("out of a sticky folder", func(t *testing.T) {
		src := ownersFile("sticky/f4")
		if errno, _ := other.do(0o022, "rename", src, at("b/f4")); errno != syscall.EPERM {
			t.Errorf("rename of another's file out of a sticky folder: %v, want %v", errno, syscall.EPERM)
		}
		if errno, _ := other.do(0o022, "unlink", src); errno != syscall.EPERM {
			t.Errorf("unlink of another's file in a sticky folder: %v, want %v", errno, syscall.EPERM)
		}
		if _, err := os.Stat(filepath.Join(backing, "sticky/f4")); err != nil {
			t.Errorf("the refused file: %v", err)
		}
	})
	t.Run("over another's file in a sticky folder", func(t *testing.T) {
		ownersFile("sticky/f5")
		own := at("a/own")
		if errno, _ := other.do(0o022, "create", own, "644"); errno != 0 {
			t.Fatal(errno)
		}
		if errno, _ := other.do(0o022, "rename", own, at("sticky/f5")); errno != syscall.EPERM {
			t.Errorf("rename over another's file in a sticky folder: %v, want %v", errno, syscall.EPERM)
		}
	})
	t.Run("own file out of a sticky folder", func(t *testing.T) {
		own := at("sticky/own")
		if errno, _ := other.do(0o022, "create", own, "644"); errno != 0 {
			t.Fatal(errno)
		}
		if errno, _ := other.do(0o022, "rename", own, at("b/own")); errno != 0 {
			t.Errorf("rename of one's own file out of a sticky folder: %v", errno)
		}
	})
}
