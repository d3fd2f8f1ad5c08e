package api

// Requests and answers of the file API.
type (
	// ReadFileRequest asks for a file's content.
	ReadFileRequest struct {
		Path string `json:"path"`
		// Run is the agent run reading; empty means the calling process.
		Run string `json:"run,omitempty"`
	}
	// ReadFileResponse is a file's content and version. Content is the
	// file's bytes as text if they are UTF-8, else base64 (Encoding
	// "base64").
	ReadFileResponse struct {
		Path     string `json:"path"`
		Content  string `json:"content"`
		Encoding string `json:"encoding,omitempty"`
		Size     int    `json:"size"`
		Version  uint64 `json:"version"`
	}
	// WriteFileRequest replaces a file's content (making it and its
	// folders if need be).
	WriteFileRequest struct {
		Path     string `json:"path"`
		Run      string `json:"run,omitempty"`
		Content  string `json:"content"`
		Encoding string `json:"encoding,omitempty"` // "" or "base64"
	}
	// WriteFileResponse is the file's new version.
	WriteFileResponse struct {
		Path    string `json:"path"`
		Size    int    `json:"size"`
		Version uint64 `json:"version"`
	}
	// EditFileRequest replaces an exact text in a file: its one
	// occurrence, or every occurrence with All.
	EditFileRequest struct {
		Path string `json:"path"`
		Run  string `json:"run,omitempty"`
		Old  string `json:"old"`
		New  string `json:"new"`
		All  bool   `json:"all,omitempty"`
	}
	// EditFileResponse is the file's new version and how many
	// occurrences were replaced.
	EditFileResponse struct {
		Path     string `json:"path"`
		Replaced int    `json:"replaced"`
		Version  uint64 `json:"version"`
	}
	// RunRequest registers a process for a run, or (Pid 0, on
	// .../runs/end) ends a run.
	RunRequest struct {
		Pid int    `json:"pid,omitempty"`
		Run string `json:"run"`
	}
	// RunResponse answers both.
	RunResponse struct {
		Run string `json:"run"`
		Pid int    `json:"pid,omitempty"`
	}
)
