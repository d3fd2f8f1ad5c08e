// Package jail is the per-thread sandbox in which warren runs an agent's
// commands: new mount, pid, ipc and uts namespaces, an unprivileged uid,
// no capabilities, seccomp and limits, with the thread's mount as the only
// writable tree at /workspace.
//
// What is here so far:
//
//   - env.go: the environment rule, what a command sees of the world
//     through its environment.
//   - jail.go, init_linux.go, protocol.go: the sandbox's first layer. Start
//     re-executes the binary (which calls RunInit when IsInit) in new
//     mount, pid, ipc, uts and (by default) network namespaces. That init
//     builds a root of its own — read-only binds of the system folders
//     (DefaultReadOnly), the thread's folder at /workspace, a private
//     /tmp, a minimal /dev with its own devpts, a /proc of the jail's pid
//     namespace — pivots into it, detaches the host's root, sets
//     no_new_privs, empties the capability bounding set, applies Landlock
//     where the kernel has it (landlock_linux.go: writes only beneath
//     /workspace, /tmp, /dev/shm; no abstract sockets or signals out of the
//     jail) and a seccomp filter (seccomp_linux.go: no new namespaces, no
//     mounts, no ptrace, no io_uring, no TIOCSTI, ...), joins a cgroup
//     with memory and process limits (limits_linux.go), and then starts
//     each command it is sent over a
//     SOCK_SEQPACKET socket pair (with its stdin, stdout and stderr as
//     descriptors) in a session of its own, as an unprivileged uid. It
//     reaps every process of the namespace; in a network of its own it
//     brings up lo, the only interface; a command's session is killed
//     when it ends or is cancelled; Close ends the init and the kernel the
//     rest.
//
// The gateway runs one jail per thread (gateway/exec.go). Still to come:
// a PTY mode.
package jail
