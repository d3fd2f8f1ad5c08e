package checkpoints

import (
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
