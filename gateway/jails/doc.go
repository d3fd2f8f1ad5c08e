// Package jails is the room of the threads' jails (package jail) and of
// the commands running in them: one jail per bound thread, started at its
// first command (For, CommandIn) and ended when the thread is closed or
// deleted, when a fence takes it down, when its workspace is restored
// with force (CloseJail), when it is idle (ReclaimIdle), when the bound
// of live jails needs its place (bound.go), or when the gateway stops
// (CloseAll). A jail whose init died is replaced at the thread's next
// command (jail.replaced).
//
// # What it owns
//
// Jails owns, under its one lock mu: the jails by thread, each with the
// settings it runs with, when it was last used and the holds on it; the
// running commands' registry (StartExec, Exec, EndExec) and the newest
// endedExecsKept ended ones (Ended), so that a signal to one is told it
// ended rather than that it never was; the marks of the threads whose
// workspace is being restored (BeginRestore, EndRestore, RestoringWhy);
// the places of the bound of live jails; and the closed flag, set by
// CloseAll, after which no jail is added. It also owns the jails' base
// namespace (StartBase, CloseBase).
//
// # Promises
//
//   - A held jail (hold, For, CommandIn: held until the caller's command
//     is registered or its job holds its slot, then Unhold) is never
//     stopped by the bound or the idle reclaim, nor is one whose thread
//     has a registered command, a job running, starting or moving, or a
//     restore under way.
//   - A command registers itself (StartExec) before it checks the
//     restore mark, under the same lock, and a restore marks
//     (BeginRestore) before it counts the commands: one of the two sees
//     the other. The jobs room takes a job slot before it reads the mark
//     (RestoringWhy), and a restore marks before it counts the slots.
//   - The bound chooses under mu, asks the jobs (Jobs.Busy) with mu let
//     go, and checks its choice again under mu: a jail held or found
//     meanwhile (its uses changed) is not taken.
//
// # What it calls
//
// The threads (Threads: the thread lock, a bind under it, the thread's
// folders), the hosts (Hosts.Claim: a warm jail's pin), the jobs room
// (Jobs: which threads' jobs run, which were closed while they ran;
// wired by SetJobs, since the jobs room imports this one), the rooms
// that hold something of a jail's (Ended, wired by AddEnded: the ports'
// channels, told of every jail's end after it closed, in end), the events
// (Emit), the metrics (JailStarted) and the fs.Hub (RegisterJail). It
// never calls them holding mu.
//
// # Lock order
//
// A thread's lock (Threads.Lock) is taken before mu, by For's callers
// and by CommandIn when it binds; mu is a leaf: held over map work only,
// never across a jail's start or end, a store call or a wait, and no
// other lock is taken under it but a Command's Stopping (an atomic
// store). The jobs room's lock and mu are taken one at a time, never
// one under the other.
//
// # Goroutines
//
// None of its own: a jail's goroutines are the jail's (package jail),
// ended by its close, which this room makes when it takes the jail out
// of the set (CloseJail, CloseAll, the bound, the idle reclaim, a dead
// jail's replacement). The idle loop that calls ReclaimIdle is the
// gateway's.
package jails
