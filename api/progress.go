package api

import "encoding/json"

// The long calls (take a checkpoint, undo, redo, revert, fork, delete a
// thread) answer a stream of their progress when the client asks for it,
// with the header Accept: application/x-ndjson or the query progress=1:
// NDJSON, one Progress frame per line while the call works (at most about
// ten a second), then one ProgressEnd, the last line. A call refused
// before it starts its work (bad input, a thread that does not exist, a
// conflict) is answered as without the stream: its status and error.

// ContentTypeNDJSON is the media type of the API's streams.
const ContentTypeNDJSON = "application/x-ndjson"

// Progress is a frame of a long call's progress: done of total units of
// phase ("read": files read by a checkpoint; "write": changes a restore
// or a fork made; "remove": entries of the workspace's top folder a
// delete removed). Total 0: the call does not know its total yet (a
// first checkpoint counts up).
type Progress struct {
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
	Phase string `json:"phase"`
}

// ProgressEnd is the last frame of a progress stream: the call's answer,
// as it would have been without the stream, or its error.
type ProgressEnd struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *APIError       `json:"error,omitempty"`
}

// ProgressFrame is any frame of a progress stream, as a client reads it:
// a Progress, or a ProgressEnd (Result or Error set).
type ProgressFrame struct {
	Progress
	Result json.RawMessage `json:"result,omitempty"`
	Error  *APIError       `json:"error,omitempty"`
}
