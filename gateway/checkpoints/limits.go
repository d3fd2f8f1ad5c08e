package checkpoints

import (
	"context"
	"errors"
	"fmt"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
	"warren/snapshot"
)

// checkpointFlag names the serve flag of one of snapshot's limits, for
// the message of a refused checkpoint.
func checkpointFlag(limit string) string { return "--checkpoint-max-" + limit }

// checkpointLimitError turns a build's error past one of the checkpoint
// limits (Config.Limits) into the call's answer, 413
// "too_large", naming the limit, its value and its flag; nil for any
// other error. The build wrote nothing that stays (snapshot removes its
// log) and the change set was given back, so the next checkpoint reads
// the same changes again.
func checkpointLimitError(k meta.ThreadKey, err error) error {
	var le *snapshot.LimitError
	if !errors.As(err, &le) {
		return nil
	}
	return call.Refuse(api.ErrTooLarge, fmt.Sprintf(
		"The checkpoint of %s was refused: %v (the server's %s). Nothing was recorded and the workspace is as it was; "+
			"make the workspace smaller, or raise the server's limit.",
		call.KeyName(k), le, checkpointFlag(le.Limit)))

}

// admitUpload refuses checkpoint cp, counted in h (fitSnapshotQuota),
// when the snapshot store's backlog has no room for its own bytes
// (Replicas.Admit): 507 no_space, saying what was not done. It runs
// before h is stored, so the caller puts h back and gives the change set
// back as for a quota refusal: nothing is lost, the next checkpoint reads
// the same changes.
func (c *Checkpoints) admitUpload(ctx context.Context, h *history, cp meta.Checkpoint) error {
	r := c.cfg.Replicas
	if r == nil {
		return nil
	}
	if counted := h.find(cp.ID); counted != nil {
		cp = *counted
	}
	err := r.Admit(ctx, SnapshotBytes([]meta.Checkpoint{cp}))
	if err == nil {
		return nil
	}
	what := "The checkpoint was not taken: nothing was recorded, and the workspace and its changes are as they were (the next checkpoint takes them)"
	if cp.Auto {
		what = fmt.Sprintf("The automatic checkpoint %s that keeps the workspace's state was not taken, so nothing was restored or changed", call.Quote(cp.Label))
	}
	return call.Refuse(api.ErrNoSpace, fmt.Sprintf("%v. %s. Checkpoints are taken again once the store answers and the waiting ones are copied; meanwhile keep working. The server's operator can bring the store back or raise --snapshot-cache-bytes.",
		err, what))
}
