package gateway

import "warren/api"

// The API's wire types, error codes and sentinel errors live in package api,
// which the Go client shares without linking the daemon. These names keep
// the gateway's code as it was while the two packages were split; new code
// uses api's names.

// Requests and answers.
type (
	BindRequest       = api.BindRequest
	BindResponse      = api.BindResponse
	ThreadResponse    = api.ThreadResponse
	ThreadsResponse   = api.ThreadsResponse
	DeleteResponse    = api.DeleteResponse
	HostsResponse     = api.HostsResponse
	ThreadInfo        = api.ThreadInfo
	MountRequest      = api.MountRequest
	MountInfo         = api.MountInfo
	MountResponse     = api.MountResponse
	MountsResponse    = api.MountsResponse
	UnmountResponse   = api.UnmountResponse
	ReadFileRequest   = api.ReadFileRequest
	ReadFileResponse  = api.ReadFileResponse
	WriteFileRequest  = api.WriteFileRequest
	WriteFileResponse = api.WriteFileResponse
	EditFileRequest   = api.EditFileRequest
	EditFileResponse  = api.EditFileResponse
	RunRequest        = api.RunRequest
	RunResponse       = api.RunResponse
	ExecRequest       = api.ExecRequest
	ExecStdinRequest  = api.ExecStdinRequest
	ExecResizeRequest = api.ExecResizeRequest
	ExecAck           = api.ExecAck
	ExecFrame         = api.ExecFrame
	SpawnRequest      = api.SpawnRequest
	BackgroundRequest = api.BackgroundRequest
	StopJobRequest    = api.StopJobRequest
	JobInfo           = api.JobInfo
	JobResponse       = api.JobResponse
	JobsResponse      = api.JobsResponse
	JobFrame          = api.JobFrame
	Event             = api.Event
	EventType         = api.EventType
	APIError          = api.APIError
)

// Limits and defaults of ids.
const (
	DefaultTenant = api.DefaultTenant
	MaxIDBytes    = api.MaxIDBytes
)

// DefaultSocket is the socket of a gateway with dataDir when
// Config.SocketPath is empty.
func DefaultSocket(dataDir string) string { return api.DefaultSocket(dataDir) }

// The kinds of events.
const (
	EventThreadBound    = api.EventThreadBound
	EventThreadClosed   = api.EventThreadClosed
	EventThreadDeleted  = api.EventThreadDeleted
	EventThreadStranded = api.EventThreadStranded
	EventEscapeRefused  = api.EventEscapeRefused
	EventWriteStale     = api.EventWriteStale
	EventJobStarted     = api.EventJobStarted
	EventJobOutput      = api.EventJobOutput
	EventJobEnded       = api.EventJobEnded
	EventJailReplaced   = api.EventJailReplaced
	EventMissed         = api.EventMissed
)

// Sentinel errors (see api for what each means).
var (
	ErrInvalid     = api.ErrInvalid
	ErrNotFound    = api.ErrNotFound
	ErrConflict    = api.ErrConflict
	ErrPinned      = api.ErrPinned
	ErrBusy        = api.ErrBusy
	ErrClosed      = api.ErrClosed
	ErrUnavailable = api.ErrUnavailable
	ErrForbidden   = api.ErrForbidden
	ErrGone        = api.ErrGone
	ErrStale       = api.ErrStale
	ErrNoMatch     = api.ErrNoMatch
	ErrOutside     = api.ErrOutside
	ErrTooLarge    = api.ErrTooLarge
	ErrFenced      = api.ErrFenced
	ErrJobLimit    = api.ErrJobLimit
	ErrNoSpace     = api.ErrNoSpace
)

// Error codes.
const (
	codeInvalid          = api.CodeInvalid
	codeNotFound         = api.CodeNotFound
	codeConflict         = api.CodeConflict
	codePinned           = api.CodePinned
	codeBusy             = api.CodeBusy
	codeClosed           = api.CodeClosed
	codeUnavailable      = api.CodeUnavailable
	codeForbidden        = api.CodeForbidden
	codeGone             = api.CodeGone
	codeTooLarge         = api.CodeTooLarge
	codeStale            = api.CodeStale
	codeNoMatch          = api.CodeNoMatch
	codeOutside          = api.CodeOutside
	codeJobLimit         = api.CodeJobLimit
	codeNoSpace          = api.CodeNoSpace
	codeFenced           = api.CodeFenced
	codeMethodNotAllowed = api.CodeMethodNotAllowed
	codeInternal         = api.CodeInternal
	codeTimeout          = api.CodeTimeout
)

// errorBody is the JSON shape of every error answer: api.ErrorBody's. It is
// a type of this package, not an alias, because the gateway's code writes
// it as an unkeyed literal, which vet allows only for a package's own types.
type errorBody struct {
	Error *APIError `json:"error"`
}
