package jail

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The jail's seccomp filter. The commands run as an unprivileged uid with
// no_new_privs, so most privileged calls fail already; the filter shuts
// the doors that stay open to such a user or that widen the kernel's
// attack surface for nothing an agent needs:
//
//   - new namespaces (unshare, setns, clone with a namespace flag; clone3,
//     whose flags a filter cannot read, answers ENOSYS so that libc falls
//     back to clone): a user namespace would give the command a root of
//     its own to attack the kernel with;
//   - the mount family, pivot_root, chroot;
//   - ptrace and process_vm_readv/writev;
//   - io_uring, bpf, perf_event_open, userfaultfd;
//   - keyrings, kernel modules, kexec, reboot, swap, accounting;
//   - the ioctls TIOCSTI and TIOCLINUX, which push input into a terminal;
//   - renameat2 with RENAME_WHITEOUT, which leaves a 0:0 character device
//     where the source was: a device node, which mknod refuses the jail's
//     uid, that the kernel lets any user make that way.
//
// Everything else is allowed; a refused call fails with EPERM.
//
// The filter reads a call's number, and numbers mean a call only in one
// ABI. So before any number is compared:
//
//   - a call of another architecture (i386 through int 0x80 on amd64,
//     aarch32 on arm64) kills the process. EPERM would be as closed, but a
//     program of another architecture in a jail is either a mistake or an
//     attempt on the filter, and a 32-bit program whose every call fails
//     runs on confused; SIGSYS ends it at its first call, visibly.
//   - a call whose number has the x32 bit (0x40000000) or a higher one set
//     fails with EPERM. x32 shares amd64's architecture value, and a
//     kernel built with x32 runs its calls under their own numbers
//     (x32's ptrace is 0x40000209, its ioctl, and so TIOCSTI, 0x40000202),
//     which no rule below would match. No amd64 or arm64 call has a number
//     that large, so the comparison is on both.

// BPF opcodes and seccomp values (linux/filter.h, linux/seccomp.h).
const (
	bpfLdAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfJge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retErrno  = unix.SECCOMP_RET_ERRNO
	offNr     = 0
	offArch   = 4
	offArg0   = 16
	offArg1   = 24
	offArg4   = 48         // the low half on a little-endian machine: flags are an int
	x32Bit    = 0x40000000 // __X32_SYSCALL_BIT
	nsFlags   = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME
	tiocLinux = 0x541C
)

// deniedSyscalls fail with EPERM in a jail.
var deniedSyscalls = []uintptr{
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
}

// auditArch is the seccomp architecture of this build.
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// filter builds the program.
func filter() ([]unix.SockFilter, error) {
	arch, err := auditArch()
	if err != nil {
		return nil, err
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	eperm := stmt(bpfRet, retErrno|uint32(unix.EPERM))
	p := []unix.SockFilter{
		// Another architecture's calls have other numbers: none pass.
		stmt(bpfLdAbs, offArch),
		jump(bpfJeq, arch, 1, 0),
		stmt(bpfRet, retKill),
		stmt(bpfLdAbs, offNr),
		// x32's calls, and numbers no call has.
		jump(bpfJge, x32Bit, 0, 1),
		eperm,
	}
	for _, nr := range deniedSyscalls {
		p = append(p, jump(bpfJeq, uint32(nr), 0, 1), eperm)
	}
	p = append(p,
		jump(bpfJeq, uint32(unix.SYS_CLONE3), 0, 1),
		stmt(bpfRet, retErrno|uint32(unix.ENOSYS)),
		// clone with a namespace flag (its flags are the first argument on
		// both architectures).
		jump(bpfJeq, uint32(unix.SYS_CLONE), 0, 3),
		stmt(bpfLdAbs, offArg0),
		jump(bpfJset, nsFlags, 0, 1),
		eperm,
		stmt(bpfLdAbs, offNr),
		jump(bpfJeq, uint32(unix.SYS_IOCTL), 0, 4),
		stmt(bpfLdAbs, offArg1),
		jump(bpfJeq, unix.TIOCSTI, 1, 0),
		jump(bpfJeq, tiocLinux, 0, 1),
		eperm,
		stmt(bpfLdAbs, offNr),
		jump(bpfJeq, uint32(unix.SYS_RENAMEAT2), 0, 3),
		stmt(bpfLdAbs, offArg4),
		jump(bpfJset, unix.RENAME_WHITEOUT, 0, 1),
		eperm,
		stmt(bpfRet, retAllow),
	)
	return p, nil
}

// installFilter applies the filter to every thread of this process (and
// so to every process it starts). no_new_privs must be set.
func installFilter() error {
	p, err := filter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
