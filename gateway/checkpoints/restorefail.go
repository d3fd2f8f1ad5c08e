package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"warren/api"
	"warren/fs"
	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
)

// Restores that cannot finish. A restore (undo, redo, revert, fork; see
// checkpoints.go) can meet a file that does not fit (the thread's disk
// quota, a full disk) or an object of the repository that is missing or
// fails its digest. Such a restore is never left journaled for every later
// call to retry (each would fail the same way, and the thread's history
// with it): it is put back. The journal records the tree the restore began
// from (meta.Restore.From), which a checkpoint holds (an undo or a revert
// takes an automatic one first); what the plan changed before it failed is
// taken back (snapshot.Recorder.Back), so the paths the plan never reached
// are not touched again. The journal is marked failed before the first
// put-back change, so that a crash from there on has the next start finish
// putting back, not the restore; then it is closed with the reason
// (History.FailedRestore), the event thread.restore_failed is sent, and
// the call answers the reason (restoreFailure).

// failedDelta returns the delta of deltas that makes path, nil if none: of
// a change of kind (a removal and an addition at one path), the addition.
func failedDelta(deltas []snapshot.Delta, path string) *snapshot.Delta {
	var found *snapshot.Delta
	for i := range deltas {
		if path != "" && deltas[i].Path == path && (found == nil || deltas[i].Op != snapshot.Removed) {
			found = &deltas[i]
		}
	}
	return found
}

// maxFailedReason bounds the reason a failed restore's journal keeps.
const maxFailedReason = 2 << 10

// failRestore ends h's journaled restore, which failed with cause (at
// delta at, if known), cleanly: it marks the journal as failed (so that a
// crash from here on finishes putting back, not the restore), puts the
// workspace back as it was before the restore, closes the journal with
// the reason (History.FailedRestore; Head and Redo stay), and says so on
// the event stream and in the error it returns. The workspace held the
// tree now when the journal's plan began; back takes back what the plan
// changed before it failed (snapshot.Recorder.Back), and the journal's
// From is the tree the restore began from. If putting back fails too, the
// journal is closed all the same, so that the thread's history keeps
// working; the next checkpoint reads the whole workspace, as it is.
func (c *Checkpoints) failRestore(ctx context.Context, h *history, now snapshot.Hash, back []snapshot.Delta, at *snapshot.Delta, cause error) error {
	orig := h.Restoring
	rs := *orig
	if rs.Failed == "" {
		rs.Failed = boundReason(cause.Error())
		h.Restoring = &rs
		if err := c.putHistory(ctx, h); err != nil {
			h.Restoring = orig
			return fmt.Errorf("restore %s to %s failed (%v), and its journal could not say so: %w", call.KeyName(h.k), rs.To, cause, err)
		}
	}
	c.log.Error("restore failed; putting the workspace back as it was", "tenant", h.k.Tenant, "thread", h.k.Thread,
		"op", rs.Op, "to", rs.To, "error", rs.Failed)
	from := now
	if rs.From != "" {
		if f, err := snapshot.ParseHash(rs.From); err == nil {
			from = f
		}
	}
	var putBack []string
	err := func() error {
		r := h.files.Restorer()
		ps, err := h.repo.Apply(ctx, back, r)
		putBack = append(putBack, ps...)
		if err != nil {
			return err
		}
		// A restore finished after a crash began from a tree that the
		// crash left half made (now): the rest of the way to From.
		more, err := h.repo.Diff(ctx, now, from)
		if err != nil {
			return err
		}
		ps, err = h.repo.Apply(ctx, more, r)
		putBack = append(putBack, ps...)
		if err != nil {
			return err
		}
		return r.Sync()
	}()
	slices.SortFunc(putBack, snapshot.ComparePaths)
	putBack = slices.Compact(putBack)
	if err != nil && ctx.Err() != nil {
		// The daemon stops: the journal, marked failed, has the next
		// start finish putting back.
		return fmt.Errorf("restore %s to %s failed (%s); putting the workspace back was cut short, the next start finishes it: %w", call.KeyName(h.k), rs.To, rs.Failed, err)
	}
	closed := rs
	closed.EndedAt = time.Now().UTC()
	if err != nil {
		c.log.Error("could not put the workspace back after a failed restore; the journal is closed, the workspace is as the restore left it",
			"tenant", h.k.Tenant, "thread", h.k.Thread, "op", rs.Op, "to", rs.To, "error", err)
		closed.Failed += "; putting the workspace back failed too: " + boundReason(err.Error())
	}
	h.Restoring, h.FailedRestore = nil, &closed
	if perr := c.putHistory(ctx, h); perr != nil {
		h.Restoring, h.FailedRestore = &rs, nil
		return fmt.Errorf("restore %s to %s failed (%s); the workspace was put back, but the journal could not be closed (the next call closes it): %w", call.KeyName(h.k), rs.To, rs.Failed, perr)
	}
	// The change set: relative to the head again if the workspace is the
	// head's tree, else lost (the next checkpoint reads the whole folder).
	if head := h.find(h.Head); err == nil && head != nil && head.Tree == from.String() {
		h.files.CommitChanges(head.ID)
	} else {
		h.files.ReturnChanges(fs.ChangeSet{Why: "a restore failed"})
	}
	if putBack == nil {
		putBack = []string{}
	}
	ev := api.Event{Type: api.EventThreadRestoreFailed, Tenant: h.k.Tenant, Thread: h.k.Thread, Actor: call.Actor(ctx),
		Checkpoint: rs.To, Op: rs.Op}
	if len(putBack) > api.MaxEventPaths {
		ev.Paths = putBack[:api.MaxEventPaths]
	} else {
		ev.Paths = putBack
	}
	ev.Message = fmt.Sprintf("the %s to %s could not finish: %s; %d paths put back as they were", rs.Op, rs.To, closed.Failed, len(putBack))
	if err != nil {
		ev.Message = fmt.Sprintf("the %s to %s could not finish: %s", rs.Op, rs.To, closed.Failed)
	}
	c.cfg.Events.Emit(ev)
	return restoreFailure(rs, at, cause, err)
}

// boundReason makes an error's text fit for the journal: valid UTF-8, at
// most maxFailedReason bytes.
func boundReason(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > maxFailedReason {
		s = strings.ToValidUTF8(s[:maxFailedReason], "") + "..."
	}
	return s
}

// restoreFailure is the error a failed restore answers: what did not fit
// (507: the thread's quota, or the disk) or what was wrong (500: an
// object of the repository missing or corrupt), and what the workspace
// holds now.
func restoreFailure(rs meta.Restore, at *snapshot.Delta, cause, putBack error) error {
	left := fmt.Sprintf("The workspace was left as it was before the %s; the checkpoints are unchanged.", rs.Op)
	if putBack != nil {
		left = fmt.Sprintf("Putting the workspace back failed too (%v): it holds part of %s; take a checkpoint or revert to one.", putBack, rs.To)
	}
	if rs.Op == "fork" {
		left = "The new thread is removed."
	}
	what := "a file"
	switch {
	case at != nil && at.New.Kind == snapshot.KindDir:
		what = "the folder " + call.Quote(at.Path)
	case at != nil:
		what = fmt.Sprintf("%s (%d bytes)", call.Quote(at.Path), at.New.Size)
	}
	switch {
	case errors.Is(cause, syscall.EDQUOT):
		return call.Refuse(api.ErrQuota, fmt.Sprintf("The %s to %s does not fit in the thread's disk quota: %s was not written. %s Free space in the workspace or raise its quota (bind --disk), then try again.", rs.Op, rs.To, what, left))
	case errors.Is(cause, syscall.ENOSPC):
		return call.Refuse(api.ErrNoSpace, fmt.Sprintf("The %s to %s does not fit on the disk, which is full: %s was not written. %s", rs.Op, rs.To, what, left))
	// The rest are failures (500), not refusals: the message says what
	// failed, and no sentinel of the cause's (a missing object is not a
	// missing thread) decides the status.
	case errors.Is(cause, snapshot.ErrCorrupt):
		return call.Refuse(nil, fmt.Sprintf("The %s to %s could not finish: an object of the snapshot repository fails its digest (%v). %s", rs.Op, rs.To, cause, left))
	case errors.Is(cause, snapshot.ErrNotFound):
		return call.Refuse(nil, fmt.Sprintf("The %s to %s could not finish: an object of the snapshot repository is missing (%v). %s", rs.Op, rs.To, cause, left))
	}
	return call.Refuse(nil, fmt.Sprintf("The %s to %s could not finish (%v). %s", rs.Op, rs.To, cause, left))
}
