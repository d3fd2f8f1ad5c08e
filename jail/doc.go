// Package jail is the per-thread sandbox in which warren runs an agent's
// commands: new mount, pid, ipc and uts namespaces, an unprivileged uid,
// no capabilities, seccomp and limits, with the thread's mount as the only
// writable tree at /workspace.
//
// So far it holds the environment rule (env.go): what a command sees of
// the world through its environment. The sandbox itself comes with the
// exec issue.
package jail
