package api

import "warren/meta"

// ExecRequest runs a command for a thread.
type ExecRequest struct {
	// Command is run with bash -c.
	Command string `json:"command"`
	// Cwd is where it runs: relative to /workspace, or absolute inside
	// it; "" means /workspace.
	Cwd string `json:"cwd,omitempty"`
	// Env are extra variables for this call (see jail.Env for what may
	// not be set).
	Env map[string]string `json:"env,omitempty"`
	// Run is the agent run the command acts as in the filesystem: its
	// processes' reads and writes on the workspace are checked against
	// the run's reads (the file API's too). "" means each process acts on
	// its own.
	Run string `json:"run,omitempty"`
	// Stdin is the command's whole input; none means empty.
	Stdin string `json:"stdin,omitempty"`
	// TimeoutSeconds ends the command's whole session after so long, with
	// exit code 124; 0 means the daemon's default (10 minutes).
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
	// OpenStdin keeps the command's input open after Stdin, for
	// POST .../exec/{id}/stdin, until one of them closes it.
	OpenStdin bool `json:"openStdin,omitempty"`
	// Tty runs the command on a terminal of its own of Rows × Cols
	// (default 24 × 80); output then comes as one "tty" stream, input is
	// open (as with OpenStdin), and POST .../exec/{id}/resize resizes it.
	Tty  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Term is a Tty command's TERM, the client's terminal type (letters,
	// digits and ".+-_", at most 64); "" means DefaultTerm. A command
	// without Tty has no TERM, and a Term without Tty is refused.
	Term string `json:"term,omitempty"`
}

// DefaultTerm is the TERM of a Tty command whose request names none.
const DefaultTerm = "xterm-256color"

// ExecStdinRequest sends input to a running command.
type ExecStdinRequest struct {
	Data  string `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"` // end of input, after Data
}

// ExecResizeRequest resizes a running command's terminal.
type ExecResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecAck answers stdin and resize calls.
type ExecAck struct {
	ID string `json:"id"`
}

// ExecFrame is one line of an exec answer: first the command's id (ID),
// then output (Stream "stdout", "stderr" or "tty" with Data), and last
// the end (Exit set).
type ExecFrame struct {
	ID       string `json:"id,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Data     string `json:"data,omitempty"`
	Exit     *int   `json:"exit,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
	// Reason and Note, on the end, say why the command ended as it did
	// when the gateway or the kernel ended it (a Reason* code, and a
	// sentence for a person); none for a command that ended by itself,
	// whatever its exit code.
	Reason string `json:"reason,omitempty"`
	Note   string `json:"note,omitempty"`
	// Background is the job the command became (POST .../background):
	// the answer ends there, and the job has the rest of its output.
	Background string `json:"background,omitempty"`
	Error      string `json:"error,omitempty"`
	// Notice, on the first frame, is a note on the thread's workspace
	// for the model, given once: the first command after the thread moved
	// to this server with its last copied checkpoint carries it.
	Notice string `json:"notice,omitempty"`
}

// SpawnRequest starts a background job.
type SpawnRequest struct {
	// Command is run like an exec's: bash -c, in the thread's jail.
	Command string `json:"command"`
	// Label names the job in lists and events; "" means the command.
	Label string `json:"label,omitempty"`
	// User is who started the job, told again when it ends so that the
	// client can wake the right user.
	User string            `json:"user,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Run  string            `json:"run,omitempty"`
}

// BackgroundRequest moves a running exec into the background.
type BackgroundRequest struct {
	User  string `json:"user,omitempty"`
	Label string `json:"label,omitempty"` // "" means the command
}

// StopJobRequest stops a job: SIGTERM to its whole tree, and SIGKILL after
// GraceSeconds (0 means the daemon's default, 5 seconds).
type StopJobRequest struct {
	GraceSeconds float64 `json:"graceSeconds,omitempty"`
}

// JobInfo is a job as the API shows it: its record, with Running true only
// while the answering daemon runs it, and how much output it kept.
type JobInfo struct {
	meta.Job
	ID string `json:"id"`
	// Running is true while the answering daemon runs the job: a job of
	// another host, or of a run of this one that crashed, has false.
	Running bool `json:"running"`
	// Ended is true once the job's end is recorded (by its host, or by
	// the note of a restart or a move).
	Ended bool `json:"ended"`
	// OutputBytes is how much the job wrote, DroppedBytes how much of it
	// is no longer kept; both only where the output is kept.
	OutputBytes  int64 `json:"outputBytes,omitempty"`
	DroppedBytes int64 `json:"droppedBytes,omitempty"`
}

// JobResponse answers spawn, show, stop and background calls.
type JobResponse struct {
	Job JobInfo `json:"job"`
}

// JobsResponse answers GET .../jobs.
type JobsResponse struct {
	Jobs []JobInfo `json:"jobs"`
}

// JobFrame is one line of GET .../jobs/{job}/output: output from Offset
// (Dropped bytes before it were lost from the ring), and last, once the
// output ended and all of it was sent, End with the exit code. A reading
// that does not follow ends with a frame of the next offset to ask for.
//
// Offsets count the bytes of the view asked for (JobStreamAll, the
// default: both streams merged; JobStreamStdout or JobStreamStderr: that
// stream alone), from the job's first byte of it.
type JobFrame struct {
	Offset int64 `json:"offset"`
	// Stream is the stream Data came from, "stdout" or "stderr", on every
	// frame with data: a frame never holds bytes of both. A terminal's
	// output (a command with Tty moved to the background) is "stdout".
	Stream  string `json:"stream,omitempty"`
	Data    string `json:"data,omitempty"`
	Dropped int64  `json:"dropped,omitempty"`
	End     bool   `json:"end,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
	// Reason and Note, on the end, are the job's (meta.Job).
	Reason string `json:"reason,omitempty"`
	Note   string `json:"note,omitempty"`
}

// The reasons a command or a job ended as it did (ExecFrame.Reason,
// meta.Job.Reason, Event.Reason). A command that ended by itself has
// none, whatever its exit code: a reason is only given where the gateway
// ended it or the kernel says so (the jail cgroup's counters, the wait
// status of its process), or, for a failure, where the jail had no network
// to look up the name it asked for.
const (
	// ReasonTimeout: its time was up (ExecRequest.TimeoutSeconds); exit 124.
	ReasonTimeout = "timeout"
	// ReasonOOM: it failed while the kernel's OOM killer ended processes
	// of the thread's jail at its memory limit.
	ReasonOOM = "oom"
	// ReasonPids: it failed while the thread's process limit refused
	// forks.
	ReasonPids = "pids"
	// ReasonReclaimed: the gateway ended its jail under it (the thread
	// was closed, deleted or restored, or the daemon stopped).
	ReasonReclaimed = "reclaimed"
	// ReasonKilled: a signal a client sent (a stop, a kill) ended it.
	ReasonKilled = "killed"
	// ReasonNoNetwork: it failed, in a jail without network, after it
	// tried to resolve a name (which fails at once there).
	ReasonNoNetwork = "no-network"
)

// The views of a job's output (GET .../jobs/{job}/output?stream=...).
const (
	// JobStreamAll is both streams merged in the order the daemon read
	// them, the newest 1 MiB of them.
	JobStreamAll = "all"
	// JobStreamStdout and JobStreamStderr are one stream alone, the
	// newest 1 MiB of it.
	JobStreamStdout = "stdout"
	JobStreamStderr = "stderr"
)
