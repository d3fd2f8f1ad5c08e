// Package version says what build the running program is, for `warren
// version`, `warrend --version`, GET /v1/version and /healthz. It uses
// only the standard library, so the client CLI stays light.
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"warren/api"
)

// Stamped by make build with -ldflags -X (see the Makefile); they are
// the linker's, never written at run time. An unstamped build (go build,
// go test) falls back to what the Go toolchain recorded of the checkout.
var (
	stampedVersion  string
	stampedRevision string
	stampedDate     string // the commit's time, RFC 3339
	stampedModified string // "true" when the tree had uncommitted changes
)

// Get returns this program's version.
func Get() api.Version {
	v := api.Version{Version: stampedVersion, Revision: stampedRevision, Date: stampedDate, Modified: stampedModified == "true", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Revision == "" {
					v.Revision = short(s.Value)
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				v.Modified = v.Modified || s.Value == "true"
			}
		}
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

// short cuts a full hash to git's default abbreviation.
func short(rev string) string {
	if len(rev) > 7 {
		return rev[:7]
	}
	return rev
}

// Print writes v for a person: the program's name and version, then the
// build and, for a daemon, its kernel's features, one per line.
func Print(w io.Writer, name string, v api.Version) {
	var build []string
	if v.Revision != "" {
		rev := "revision " + v.Revision
		if v.Modified {
			rev += ", modified"
		}
		build = append(build, rev)
	}
	if v.Date != "" {
		build = append(build, v.Date)
	}
	build = append(build, v.GoVersion)
	fmt.Fprintf(w, "%s %s (%s)\n", name, v.Version, strings.Join(build, "; "))
	for _, f := range v.Kernel {
		state := "yes"
		if !f.OK {
			state = "no"
		}
		fmt.Fprintf(w, "  %-14s %-3s %s\n", f.Name, state, f.Detail)
	}
}
