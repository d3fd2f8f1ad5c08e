package api

import (
	"time"

	"warren/meta"
)

// Checkpoints: recorded states of a thread's workspace (regular files
// with their content and mode, symlinks, folders, empty ones too), kept in
// the tenant's snapshot repository, listed in the metadata store with the
// thread's undo/redo position.

// CheckpointRequest is the optional body of POST .../checkpoints.
type CheckpointRequest struct {
	// Label names the checkpoint for a person ("before turn 5").
	Label string `json:"label,omitempty"`
	// Turn and Run say which turn of which agent run it precedes or ends.
	Turn int    `json:"turn,omitempty"`
	Run  string `json:"run,omitempty"`
}

// CheckpointInfo is a checkpoint as the API shows it.
type CheckpointInfo struct {
	meta.Checkpoint
	// Head says the workspace was last made or restored at this one.
	Head bool `json:"head,omitempty"`
}

// CheckpointCost says what taking a checkpoint read and wrote.
type CheckpointCost struct {
	// Full says the whole workspace was read: the changes since the last
	// checkpoint were not known (a restart, a first checkpoint).
	Full bool `json:"full"`
	// Read is how many files and links were read.
	Read int64 `json:"read"`
	// NewObjects and NewBytes are what went into the repository.
	NewObjects int64 `json:"newObjects"`
	NewBytes   int64 `json:"newBytes"`
	// Millis is how long it took, in milliseconds.
	Millis float64 `json:"millis"`
}

// RestoreRequest is the body of POST .../undo, .../redo, .../revert.
type RestoreRequest struct {
	// Checkpoint is the checkpoint to revert to (revert only).
	Checkpoint string `json:"checkpoint,omitempty"`
	// Force stops the thread's running commands and jobs first; without
	// it a restore is refused while any runs.
	Force bool `json:"force,omitempty"`
}

// ForkRequest is the body of POST .../fork.
type ForkRequest struct {
	// Checkpoint is the checkpoint the new thread starts at; the head if
	// empty.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Thread is the new thread's id, in the same tenant; one is made up
	// when empty.
	Thread string `json:"thread,omitempty"`
}

// Answers of the checkpoint calls.
type (
	// CheckpointResponse answers POST .../checkpoints.
	CheckpointResponse struct {
		Checkpoint CheckpointInfo `json:"checkpoint"`
		Cost       CheckpointCost `json:"cost"`
	}
	// CheckpointsResponse answers GET .../checkpoints: oldest first.
	CheckpointsResponse struct {
		Checkpoints []CheckpointInfo `json:"checkpoints"`
		// Head is the checkpoint the workspace was last made or restored
		// at; Redo the checkpoints a redo goes back to, the next last.
		Head string   `json:"head,omitempty"`
		Redo []string `json:"redo,omitempty"`
		// FailedRestore is the last restore of the thread that could
		// not finish and was put back, if any.
		FailedRestore *FailedRestore `json:"failedRestore,omitempty"`
		// Replicating says the server copies checkpoints to a snapshot
		// store, so that a checkpoint's Replicated false means "not yet"
		// rather than "never".
		Replicating bool `json:"replicating,omitempty"`
	}
	// FailedRestore is a restore that could not finish: the workspace
	// was put back as it was before it.
	FailedRestore struct {
		Op        string    `json:"op"` // "undo", "redo", "revert", "fork"
		To        string    `json:"to"` // the checkpoint it could not restore
		Reason    string    `json:"reason"`
		StartedAt time.Time `json:"startedAt"`
		EndedAt   time.Time `json:"endedAt"`
	}
	// RestoreResponse answers undo, redo and revert.
	RestoreResponse struct {
		// Op is "undo", "redo" or "revert"; To is the checkpoint the
		// workspace now is at.
		Op string `json:"op"`
		To string `json:"to"`
		// Saved is the checkpoint taken of what the workspace held before,
		// when it held changes no checkpoint had.
		Saved string `json:"saved,omitempty"`
		// Changed lists the paths the restore changed.
		Changed []string `json:"changed"`
		// Stopped lists the commands and jobs that force stopped.
		Stopped []string `json:"stopped,omitempty"`
		Head    string   `json:"head"`
		Redo    []string `json:"redo,omitempty"`
	}
	// ForkResponse answers POST .../fork: the new thread.
	ForkResponse struct {
		Binding    ThreadInfo `json:"binding"`
		MountPath  string     `json:"mountPath"`
		Checkpoint string     `json:"checkpoint"` // the new thread's first checkpoint
		From       string     `json:"from"`       // the checkpoint it was made from
	}
	// DiffResponse answers GET .../diff: what makes From into To.
	DiffResponse struct {
		From     string   `json:"from"`
		To       string   `json:"to"` // "now" for the workspace as it is
		Added    []string `json:"added"`
		Removed  []string `json:"removed"`
		Modified []string `json:"modified"`
		// Diffs are unified text diffs of the changed text files, when
		// asked for (text=true); binary and big files have none.
		Diffs []FileDiff `json:"diffs,omitempty"`
	}
)

// FileDiff is one file's unified diff.
type FileDiff struct {
	Path string `json:"path"`
	Diff string `json:"diff"`
}

// Events of checkpoints, on the event stream.
const (
	// EventCheckpointCreated: a checkpoint was taken (Checkpoint, Label,
	// Paths: what changed since the one before it).
	EventCheckpointCreated EventType = "checkpoint.created"
	// EventThreadRestored: the workspace was restored to a checkpoint
	// (Checkpoint, Op, Paths: what the restore changed).
	EventThreadRestored EventType = "thread.restored"
	// EventThreadRestoreFailed: a restore could not finish (over the
	// disk quota, a full disk, an object of the repository missing or
	// corrupt) and the workspace was put back as it was before it
	// (Checkpoint, Op, Message: the reason; Paths: what was put back).
	EventThreadRestoreFailed EventType = "thread.restore_failed"
)

// MaxEventPaths bounds the paths an event lists; Message then says how
// many there were.
const MaxEventPaths = 1000
