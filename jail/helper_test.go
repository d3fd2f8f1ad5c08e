package jail

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as a program run inside jails, for what a shell
// cannot do: raw system calls with chosen numbers and flags, and a CPU
// spinner that reports what it got. TestMain runs helperMain when the
// variable helperVar names a helper.

const helperVar = "WARREN_JAIL_TEST_HELPER"

// helperMain runs the helper named by helperVar with args and returns its
// exit code.
func helperMain(name string, args []string) int {
	switch name {
	case "syscall":
		// syscall NR [ARG...]: prints ok or the errno's name.
		var a [6]uintptr
		nr, err := strconv.ParseUint(args[0], 0, 64)
		if err != nil {
			fmt.Println(err)
			return 2
		}
		for i, s := range args[1:] {
			v, err := strconv.ParseUint(s, 0, 64)
			if err != nil {
				fmt.Println(err)
				return 2
			}
			a[i] = uintptr(v)
		}
		_, _, errno := unix.RawSyscall6(uintptr(nr), a[0], a[1], a[2], a[3], a[4], a[5])
		fmt.Println(errnoName(errno))
	case "whiteout":
		// whiteout DIR: renames DIR/a to DIR/b with RENAME_WHITEOUT, and
		// prints the call's result and what is left at DIR/a.
		a, b := filepath.Join(args[0], "a"), filepath.Join(args[0], "b")
		if err := os.WriteFile(a, []byte("a"), 0o644); err != nil {
			fmt.Println(err)
			return 2
		}
		err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_WHITEOUT)
		var st unix.Stat_t
		left := "nothing"
		if unix.Lstat(a, &st) == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				left = "file"
			case unix.S_IFCHR:
				left = fmt.Sprintf("chardev %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
			default:
				left = fmt.Sprintf("mode %o", st.Mode)
			}
		}
		fmt.Println(errnoName(err), left)
	case "spin":
		// spin SECONDS: keeps one CPU busy for that long on the clock and
		// prints the CPU seconds it got.
		d, err := time.ParseDuration(args[0] + "s")
		if err != nil {
			fmt.Println(err)
			return 2
		}
		for end := time.Now().Add(d); time.Now().Before(end); {
			for i := 0; i < 1e5; i++ {
			}
		}
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &ru)
		fmt.Printf("%.3f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	case "burn":
		// burn SECONDS: keeps one CPU busy until it has used that much
		// CPU time, however long the machine takes to give it.
		d, err := time.ParseDuration(args[0] + "s")
		if err != nil {
			fmt.Println(err)
			return 2
		}
		for {
			var ts unix.Timespec
			unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
			if time.Duration(ts.Nano()) >= d {
				break
			}
			for i := 0; i < 1e5; i++ {
			}
		}
	case "alloc":
		// alloc MIB: touches that many MiB of memory, then ends.
		n, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Println(err)
			return 2
		}
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(len(b) >> 20)
	case "hold-jail":
		// hold-jail WORKSPACE: starts a jail with a CPU bound over
		// WORKSPACE, prints its init's pid, and holds it until killed.
		j, err := Start(context.Background(), Config{Workspace: args[0], CPUMillis: 100})
		if err != nil {
			fmt.Println(err)
			return 2
		}
		fmt.Println(j.InitPid())
		select {}
	case "hold-jail-plain":
		// hold-jail-plain WORKSPACE: starts a jail without limits asked
		// for over WORKSPACE, prints its init's pid, and holds it until
		// killed.
		j, err := Start(context.Background(), Config{Workspace: args[0]})
		if err != nil {
			fmt.Println(err)
			return 2
		}
		fmt.Println(j.InitPid())
		select {}
	case "echo-server":
		// echo-server ADDR: listens on ADDR (port 0: any), prints the
		// port, and answers each connection with "hello" and then echoes
		// what it reads, until killed.
		ln, err := net.Listen("tcp", args[0])
		if err != nil {
			fmt.Println(err)
			return 2
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		for {
			c, err := ln.Accept()
			if err != nil {
				fmt.Println(err)
				return 2
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "hello\n")
				io.Copy(c, c)
			}()
		}
	default:
		fmt.Printf("no helper %q\n", name)
		return 2
	}
	return 0
}

func errnoName(err error) string {
	switch e := err.(type) {
	case nil:
		return "ok"
	case unix.Errno:
		if e == 0 {
			return "ok"
		}
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}

// installHelper copies the test binary into the workspace ws and returns
// its path in the jail. helperEnv is the variable that runs a helper.
func installHelper(t *testing.T, ws string) string {
	t.Helper()
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	dst, err := os.OpenFile(filepath.Join(ws, "jailtest"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, self); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(Workspace, "jailtest")
}

// helperEnv is a command's environment that runs helper name.
func helperEnv(t *testing.T, name string) []string {
	t.Helper()
	env, err := Env(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(env, helperVar+"="+name)
}
