package api

import "time"

// Image is one image of the server's image store (GET /v1/images).
type Image struct {
	// Ref is the normalised reference it was pulled or loaded as
	// ("docker.io/library/node:22"); Refs lists every one, when several
	// name the same image.
	Ref  string   `json:"ref"`
	Refs []string `json:"refs,omitempty"`
	// Digest is the digest of the image's manifest for this server's
	// platform: the image's identity, which a thread's binding keeps.
	Digest string `json:"digest"`
	// Bytes is the size of its unpacked root filesystem, on disk once
	// whatever the number of threads using it.
	Bytes int64 `json:"bytes"`
	// Loaded says it came from an archive (warren image load), not from
	// a registry: another server cannot pull it.
	Loaded bool `json:"loaded,omitempty"`
	// Threads are the bound threads (tenant/thread) whose image it is.
	Threads  []string  `json:"threads,omitempty"`
	PulledAt time.Time `json:"pulledAt"`
	UsedAt   time.Time `json:"usedAt,omitzero"`
}

// ImagesResponse answers GET /v1/images.
type ImagesResponse struct {
	Images []Image `json:"images"`
	// StoreBytes is the store's size, LimitBytes its bound (0: none).
	StoreBytes int64 `json:"storeBytes"`
	LimitBytes int64 `json:"limitBytes,omitempty"`
}

// PullRequest is the body of POST /v1/images/pull.
type PullRequest struct {
	Ref string `json:"ref"`
}

// LoadRequest is the body of POST /v1/images/load: an archive on the
// server's disk, an OCI image layout in a tar or a docker save tarball.
type LoadRequest struct {
	// Path is absolute, read with the daemon's rights.
	Path string `json:"path"`
	// Name names the image when the archive does not, or over its own.
	Name string `json:"name,omitempty"`
}

// ImageResponse answers a pull or a load.
type ImageResponse struct {
	Image Image `json:"image"`
}

// RemoveImageResponse answers DELETE /v1/images.
type RemoveImageResponse struct {
	// Removed is the reference (or digest) removed, normalised.
	Removed string `json:"removed"`
}
