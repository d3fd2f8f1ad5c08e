package api

import "time"

// Requests and answers of the file API's tree calls (list, stat, exists,
// mkdir, remove, rename) and of its raw content (GET and PUT
// .../files/raw). Paths are relative to the workspace, or absolute under
// the thread's mount path, as for the other file calls; Run names the
// agent run acting (empty: the calling process).

// Kinds of entries (Entry.Type).
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other" // a fifo, a socket, a device
)

type (
	// ListRequest asks for a folder's entries.
	ListRequest struct {
		Path string `json:"path"`
		Run  string `json:"run,omitempty"`
	}
	// Entry is one entry of a workspace.
	Entry struct {
		Name string `json:"name"`
		// Path is the entry's path relative to the workspace, through
		// the folder as it was named.
		Path string `json:"path"`
		Type string `json:"type"` // TypeFile, TypeDir, TypeSymlink, TypeOther
		Size int64  `json:"size"`
		// Mode is the permission bits, with the set-id and sticky bits
		// (mode & 07777).
		Mode  uint32    `json:"mode"`
		MTime time.Time `json:"mtime"`
		// Version moves on every change of the path (0 for the root).
		Version uint64 `json:"version"`
		Target  string `json:"target,omitempty"` // a symlink's target
	}
	// ListResponse is a folder's entries, sorted by name; the file API's
	// hidden temporary files are left out.
	ListResponse struct {
		Path    string  `json:"path"`
		Entries []Entry `json:"entries"`
	}
	// StatRequest asks what a path is. With Follow, a symlink as the
	// last component is followed inside the workspace and its target
	// described.
	StatRequest struct {
		Path   string `json:"path"`
		Run    string `json:"run,omitempty"`
		Follow bool   `json:"follow,omitempty"`
	}
	// StatResponse describes one entry.
	StatResponse struct {
		Path    string    `json:"path"`
		Type    string    `json:"type"`
		Size    int64     `json:"size"`
		Mode    uint32    `json:"mode"`
		MTime   time.Time `json:"mtime"`
		Version uint64    `json:"version"`
		Target  string    `json:"target,omitempty"`
	}
	// ExistsRequest asks whether a path names an entry (a symlink is
	// followed, as test -e does).
	ExistsRequest struct {
		Path string `json:"path"`
		Run  string `json:"run,omitempty"`
	}
	// ExistsResponse says whether it does, and what it is.
	ExistsResponse struct {
		Path   string `json:"path"`
		Exists bool   `json:"exists"`
		Type   string `json:"type,omitempty"`
	}
	// MkdirRequest makes a folder; with Parents, the missing folders on
	// the way too, and an existing folder is no error (mkdir -p). Mode is
	// its permission bits exactly (no umask); nil means 0755.
	MkdirRequest struct {
		Path    string  `json:"path"`
		Run     string  `json:"run,omitempty"`
		Parents bool    `json:"parents,omitempty"`
		Mode    *uint32 `json:"mode,omitempty"`
	}
	// MkdirResponse answers it.
	MkdirResponse struct {
		Path string `json:"path"`
	}
	// RemoveRequest removes a file, a link (never what it leads to) or an
	// empty folder; with Recursive, a folder and everything in it.
	RemoveRequest struct {
		Path      string `json:"path"`
		Run       string `json:"run,omitempty"`
		Recursive bool   `json:"recursive,omitempty"`
	}
	// RemoveResponse says how many entries went.
	RemoveResponse struct {
		Path    string `json:"path"`
		Removed int    `json:"removed"`
	}
	// RenameRequest moves an entry inside the workspace (a link as
	// itself). An entry at To is replaced only with Overwrite.
	RenameRequest struct {
		From      string `json:"from"`
		To        string `json:"to"`
		Run       string `json:"run,omitempty"`
		Overwrite bool   `json:"overwrite,omitempty"`
	}
	// RenameResponse gives the version To now has.
	RenameResponse struct {
		From    string `json:"from"`
		To      string `json:"to"`
		Version uint64 `json:"version"`
	}
	// RawRequest names a file for GET or PUT .../files/raw (its query
	// parameters: path, run, and for PUT mode).
	RawRequest struct {
		Path string
		Run  string
		// Mode, for a PUT, is the file's permission bits; nil keeps an
		// existing file's, and gives a new one 0644.
		Mode *uint32
	}
	// RawInfo is what GET .../files/raw says beside the content (its
	// headers Content-Length and X-Warren-Version), and the answer of a
	// PUT.
	RawInfo struct {
		Path    string `json:"path"`
		Size    int64  `json:"size"`
		Version uint64 `json:"version"`
	}
)

// VersionHeader is the header of GET .../files/raw that carries the
// version of the content it sends.
const VersionHeader = "X-Warren-Version"
