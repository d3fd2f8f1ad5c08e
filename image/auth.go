package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// authFile is the part of a Docker config.json the store reads: the
// "auths" map, host to credentials (basic auth, "auth" as base64
// user:password, or identity and registry tokens). Credential helpers and
// credsStore are not run: a pull never executes a program named in a file.
type authFile struct {
	Auths map[string]authn.AuthConfig `json:"auths"`
}

// keychain gives go-containerregistry the credentials of Config.AuthFile;
// anonymous for a registry the file does not name, or when there is no
// file.
type keychain struct {
	auths map[string]authn.AuthConfig // by normalised registry
}

var _ authn.Keychain = keychain{}

// readAuthFile reads path ("" = no credentials). It is read at every pull,
// so that a credential changed on disk takes effect without a restart.
func readAuthFile(path string) (keychain, error) {
	k := keychain{auths: map[string]authn.AuthConfig{}}
	if path == "" {
		return k, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return k, fmt.Errorf("image: reading the registry credentials: %w", err)
	}
	var f authFile
	if err := json.Unmarshal(b, &f); err != nil {
		return k, fmt.Errorf("image: registry credentials %s: %w", path, err)
	}
	for host, a := range f.Auths {
		k.auths[authHost(host)] = a
	}
	return k, nil
}

// authHost is the registry a key of "auths" names: Docker writes Docker
// Hub's as "https://index.docker.io/v1/", others as a bare host or a URL.
func authHost(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	if i := strings.IndexByte(key, '/'); i >= 0 {
		key = key[:i]
	}
	return normRegistry(key)
}

func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	a, ok := k.auths[normRegistry(r.RegistryStr())]
	if !ok {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(a), nil
}
