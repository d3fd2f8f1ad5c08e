package api

import "time"

// EventType names what an event tells.
type EventType string

// The kinds of events.
const (
	// EventThreadBound: a bind mounted the thread's workspace (a first
	// bind, a bind after close, or a bind that mounted again a thread whose
	// mount had failed). A bind of a mounted thread changes nothing and
	// tells nothing.
	EventThreadBound EventType = "thread.bound"
	// EventThreadClosed: the thread went from bound to closed.
	EventThreadClosed EventType = "thread.closed"
	// EventThreadDeleted: the thread's folder and records were removed.
	EventThreadDeleted EventType = "thread.deleted"
	// EventThreadStranded: a gateway took the thread over from a host that
	// died and could not reach its folder: every call fails now.
	EventThreadStranded EventType = "thread.stranded"
	// EventThreadMoved: a gateway took the thread over from a host that
	// died, and restored the newest checkpoint that host copied to the
	// snapshot store (serve --on-unreachable restore); Checkpoint names it
	// and Message is the note the model gets.
	EventThreadMoved EventType = "thread.moved"
	// EventEscapeRefused: a mount of the thread refused an operation that
	// would have left the workspace (a link out of it, a device node...).
	EventEscapeRefused EventType = "escape.refused"
	// EventWriteStale: a write was made from an outdated view of a file.
	EventWriteStale EventType = "write.stale"
	// EventJobStarted: a background job started (Job, Label, User).
	EventJobStarted EventType = "job.started"
	// EventJobOutput: a chunk of a job's output (Job, Stream, Data), in
	// order within each stream.
	EventJobOutput EventType = "job.output"
	// EventJobEnded: a job ended (Job, Exit, and User, who started it),
	// or was found stopped by a restart (Message says so, no Exit).
	EventJobEnded EventType = "job.ended"
	// EventNetworkRefused: the thread's jail was refused a connection or
	// a name by the network's rules (Message says which and why); at
	// most one a second per thread.
	EventNetworkRefused EventType = "network.refused"
	// EventJailReplaced: the thread's jail ended unexpectedly (its init
	// died), with its commands and jobs; the thread's next command started
	// a new one. Message says so.
	EventJailReplaced EventType = "jail.replaced"
	// EventJailReclaimed: no command or job ran in the thread's jail for
	// its idle time, and the gateway stopped it to give its memory back.
	// The thread stays bound and mounted; its next command starts a new
	// jail. Message says how long it was idle.
	EventJailReclaimed EventType = "jail.reclaimed"
	// The file events: an entry of the thread's workspace was made,
	// changed (content, size, mode or times), removed or renamed, through
	// a mount or the file API, or found changed behind the filesystem's
	// back (no Actor then). Path is the entry (the new one of a rename,
	// From the old), Actor who made the change, Version the path's
	// version after it. Changes are told as they happen, writes through a
	// handle when it closes; a burst of changes to one entry is one
	// file.changed event per 100 ms. They are built only while a reader
	// wants the thread's events.
	EventFileCreated EventType = "file.created"
	EventFileChanged EventType = "file.changed"
	EventFileRemoved EventType = "file.removed"
	EventFileRenamed EventType = "file.renamed"
	// EventThreadFenced: this gateway's lease ended, and it took the thread
	// down (jail, commands, jobs, mount) as another host may take it now. The
	// thread's next call pins it again, if no other host took it, and mounts
	// it again.
	EventThreadFenced EventType = "thread.fenced"
	// EventMissed is not something that happened to a thread: the stream
	// writes it where it dropped events because its reader fell behind.
	// Missed says how many; Tenant and Thread are the stream's filter.
	EventMissed EventType = "missed"
)

// The headers of the event stream's answer, for a reader that resumes it
// (a watcher of a thread's files):
//
//   - HeaderEventSeq is the seq of the newest event when the stream
//     began: it brings every event after that one (after since, when
//     asked), so a reader that saw no event yet resumes with since set to
//     it;
//   - HeaderEventRun names this run of the daemon: a new one at each
//     start. File events are built only while a reader follows a thread
//     (and 10 minutes after), so a reader that finds another run, or that
//     was away longer, may have missed changes that no event says.
const (
	HeaderEventSeq = "X-Warren-Event-Seq"
	HeaderEventRun = "X-Warren-Event-Run"
)

// Event is one line of the event stream.
type Event struct {
	// Seq numbers the events of this gateway: 1, 2, 3... in the order they
	// were emitted, from the start of the process. A filtered stream sees
	// gaps. A missed event has Seq 0: it is a note about one stream, not
	// something the gateway emitted.
	Seq uint64 `json:"seq"`
	// Time is when the event was emitted (UTC); JSON gives it as RFC 3339
	// with nanoseconds.
	Time   time.Time `json:"time"`
	Type   EventType `json:"type"`
	Tenant string    `json:"tenant"`
	Thread string    `json:"thread"`
	// Actor is who caused the event, when the gateway knows: "uid:N" for
	// the peer of an API call.
	Actor string `json:"actor,omitempty"`
	// Path is a path inside the thread's workspace, "/"-separated and
	// starting with "/", for events about one file.
	Path string `json:"path,omitempty"`
	// From is the old path of a file.renamed event.
	From string `json:"from,omitempty"`
	// Version is a path's version after a file event's change.
	Version uint64 `json:"version,omitempty"`
	// Message says what happened, for a person.
	Message string `json:"message,omitempty"`
	// Missed is how many events a missed event stands for.
	Missed uint64 `json:"missed,omitempty"`
	// Job, Label, User, Exit and Data tell about a background job: its
	// id, its label, who started it, its exit code, a chunk of its output.
	Job   string `json:"job,omitempty"`
	Label string `json:"label,omitempty"`
	User  string `json:"user,omitempty"`
	Exit  *int   `json:"exit,omitempty"`
	Data  string `json:"data,omitempty"`
	// Reason is why a job.ended job ended as it did (a Reason* code),
	// with Message its note.
	Reason string `json:"reason,omitempty"`
	// Stream is the stream a job.output event's Data came from: "stdout"
	// or "stderr" (a terminal's output is "stdout"). An event never holds
	// bytes of both.
	Stream string `json:"stream,omitempty"`
	// Checkpoint and Op tell about a checkpoint (checkpoint.created) or a
	// restore (thread.restored: "undo", "redo", "revert", "fork"), and
	// Paths which paths of the workspace they concern (at most
	// MaxEventPaths; Message says how many there were).
	Checkpoint string   `json:"checkpoint,omitempty"`
	Op         string   `json:"op,omitempty"`
	Paths      []string `json:"paths,omitempty"`
}
