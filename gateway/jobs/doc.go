// Package jobs is the room of the commands the API runs in the threads'
// jails: the exec calls (exec.go), whose output streams to their caller
// and which may move to the background, and the background jobs
// (jobs.go): spawned, listed, shown, followed (jobstreams.go,
// joboutput.go, jobpipes_linux.go), stopped, fed and signalled
// (signals.go), and recorded in the store with how and why they ended
// (endreason.go). Its handlers are Handlers (http.go).
//
// # What it owns
//
// Jobs owns, under its lock mu, the jobs by thread (each thread's job
// slots, its running and newest endedJobsKept ended jobs, and whether it
// was closed while its jobs ran) and the closed flag, set by Close, after
// which no job slot is taken; and its WaitGroup, wg, which counts every
// slot taken until its job's end is recorded, and the closeIdle calls
// those ends start. Each job owns its record (job.mu), its output
// (jobStreams) and its input (job.stdinMu). The running exec calls are
// registered in the jails room (jails.StartExec): their registry, and
// the restore marks it checks, are the jails' and live under their lock.
//
// # Promises
//
//   - A thread runs at most maxJobs jobs at once here; one more, or a
//     move to the background at the limit, is refused (429 job_limit).
//   - A slot is taken before the restore mark is read
//     (takeJobSlotIfNotRestoring), and a restore marks before it counts
//     the slots (RunningIDs): one of the two sees the other.
//   - A job's end is recorded before its output ends, and counted in the
//     metrics before it is recorded.
//   - A client that hangs up ends its exec only, never a job.
//
// # What it calls
//
// The jails (package jails: CommandIn, StartExec, EndExec, Exec, Ended,
// RestoringWhy, NoteStopping), the store, the threads (Threads.TakeDown:
// closeIdle), the events (Emit, Wants), the metrics (ExecEnded,
// JobStarted, JobEnded) and the network (Lookups: TriedToResolve, Modes,
// for the note of a command that failed without network, wired by the
// gateway). The jails call it back through jails.Jobs
// (Busy, Closing), wired by the gateway.
//
// # Lock order
//
// Jobs.mu is a leaf, held over map work only; it and the jails' lock are
// taken one at a time, never one under the other (NoteStopping marks the
// jobs under Jobs.mu and job.mu in turn, then the execs under the
// jails'). The other locks are leaves too, but for these:
//
//   - job.mu: a job's record, why it is being stopped, and whether a
//     client killed it.
//   - jobStreams.mu: a write of a job's output to one stream's ring and
//     its marks, a read of the merged view; the stream's jobOutput.mu is
//     taken under it (never the other way round).
//   - jobOutput.mu: copying one stream of a job's output in or out of its
//     ring, alone for a reader of that stream.
//   - jobPipes.mu: which of a job's pipes is which, and which ended.
//   - frames.mu: one frame of an exec's answer.
//   - job.stdinMu (a job's input pipe) and runningExec.mu (a command's
//     input pipe) are held across one write, with only leaves under
//     them; switchWriter.mu is held across one write of an exec's
//     output, under which it goes to frames.mu (the client's answer) or,
//     once it moved to the background, to the job's jobStreams.mu and the
//     events' lock (Emit).
//
// # Goroutines
//
//   - a command's run (exec.go): its exec stream (ServeStream), which
//     waits for its result, or the job it became; the stream's delayed
//     flush of the id (flushLater) is stopped before the answer ends;
//   - a job's run, and its finishJob: the job, counted in wg from its
//     slot's reservation until its end is recorded;
//   - closeIdle, started by the end of the last job of a closed thread:
//     counted in wg too, added while the ending job still counts.
//
// The gateway's Close calls Close (no slot is taken after it), then
// NoteStoppingAll, ends the jails (jails.CloseAll, which ends every
// command and job), then Wait.
package jobs
