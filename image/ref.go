package image

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is the registry a reference without one names, as written
// after normalisation; hubHost is where its API answers.
const (
	dockerHub = "docker.io"
	hubHost   = "index.docker.io"
)

// Ref is a normalised image reference: a registry, a repository, and a tag
// or a digest. The zero Ref is not valid; make one with ParseRef.
type Ref struct {
	registry   string
	repository string
	tag        string
	digest     string
}

// ParseRef normalises a reference as Docker does: "node:22" is
// "docker.io/library/node:22", "node" is "docker.io/library/node:latest",
// "registry.example:5000/team/py:3.12" stays as it is, and a digest
// reference ("name@sha256:<64 hex>") keeps its digest (and drops a tag
// written before it: the digest alone names the image).
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{}, fmt.Errorf("image: empty reference")
	}
	if strings.TrimSpace(s) != s || strings.ContainsAny(s, " \t\r\n") {
		return Ref{}, fmt.Errorf("image: reference %q holds white space", s)
	}
	r, err := name.ParseReference(s)
	if err != nil {
		return Ref{}, fmt.Errorf("image: reference %q: %w", s, err)
	}
	ref := Ref{
		registry:   normRegistry(r.Context().RegistryStr()),
		repository: r.Context().RepositoryStr(),
	}
	switch r := r.(type) {
	case name.Tag:
		ref.tag = r.TagStr()
	case name.Digest:
		ref.digest = r.DigestStr()
		if !strings.HasPrefix(ref.digest, "sha256:") {
			return Ref{}, fmt.Errorf("image: reference %q: only sha256 digests are taken", s)
		}
	}
	return ref, nil
}

// normRegistry is a registry's name as the store compares it: lower case,
// and Docker Hub's aliases as "docker.io".
func normRegistry(r string) string {
	r = strings.ToLower(r)
	switch r {
	case hubHost, "registry-1.docker.io", "registry.hub.docker.com":
		return dockerHub
	}
	return r
}

// String is the normalised form, "registry/repository:tag" or
// "registry/repository@sha256:...".
func (r Ref) String() string {
	if r.digest != "" {
		return r.registry + "/" + r.repository + "@" + r.digest
	}
	return r.registry + "/" + r.repository + ":" + r.tag
}

// Registry is the registry's host[:port] as written after normalisation
// ("docker.io" for Docker Hub).
func (r Ref) Registry() string { return r.registry }

// Repository is the repository within the registry ("library/node").
func (r Ref) Repository() string { return r.repository }

// Tag is the tag, "" for a digest reference.
func (r Ref) Tag() string { return r.tag }

// Digest is "" or the "sha256:..." the reference names.
func (r Ref) Digest() string { return r.digest }

// IsZero reports whether r is the zero Ref (no reference at all).
func (r Ref) IsZero() bool { return r.repository == "" }

// name is r as go-containerregistry names it, plain HTTP allowed or not.
func (r Ref) name(insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	n, err := name.ParseReference(r.String(), opts...)
	if err != nil {
		return nil, fmt.Errorf("image: reference %s: %w", r, err)
	}
	return n, nil
}
