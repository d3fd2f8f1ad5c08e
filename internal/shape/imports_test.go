package shape

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// rooms says which rooms of the daemon each room may import (issue "the
// gateway as rooms"): the dependencies run one way, from the composing
// package gateway down to the leaves. A room that must call a higher one
// declares a small interface of what it calls, and package gateway wires
// the higher room into it. Package gateway itself may import every room.
// A new package under gateway/ must be added here: the test fails for a
// room it does not know.
var rooms = map[string][]string{
	// Leaves: no room of the daemon's but what they are built on.
	"call":        {"admit"},
	"admit":       nil,
	"lease":       nil,
	"remount":     nil,
	"threadlimit": nil,
	"keyed":       nil,
	"quota":       {"call"},
	"events":      {"call"},
	"metrics":     {"call", "threadlimit"},
	"hosts":       {"call", "lease"},
	// The jails' networks: below the jails, which call them through an
	// interface; the network call changes settings through one too.
	"network": {"call"},
	// The jails' images: below the threads and the jails, which pin and
	// mount them through interfaces of their own.
	"images": {"call"},
	// The threads and their mounts: every room that works in a thread
	// is above them.
	"threads": {"call", "keyed", "hosts", "lease", "quota", "events", "metrics", "remount", "threadlimit"},
	"inspect": {"call", "threads"},
	"files":   {"call", "threads", "events", "metrics"},
	"jails":   {"call", "threads", "hosts", "events", "metrics"},
	"jobs":    {"call", "jails", "threads", "hosts", "events", "metrics"},
	// The channels into the jails' ports: the jails through an
	// interface of their own (ports.Jails), told of a jail's end
	// (jails.Ended).
	"ports": {"call"},
	// Above the commands: what stops them or waits for them.
	"checkpoints": {"call", "keyed", "threads", "jails", "jobs", "quota", "events", "metrics"},
	"idle":        {"threads", "jails", "jobs", "events"},
	// The checkpoints' copies in the snapshot store: the checkpoints call
	// it through an interface of their own (checkpoints.Replicas), and it
	// reads their repositories through one (replicas.Repos).
	"replicas": {"call", "keyed"},
	"health":   {"call", "threads", "jails", "jobs", "hosts", "quota", "checkpoints", "metrics", "events", "admit", "remount", "threadlimit"},
}

// TestRoomImports holds the import graph of the rooms under gateway/ to
// the table above.
func TestRoomImports(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}} {{join .Imports \",\"}}", "warren/gateway/...")
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	const prefix = module + "/gateway/"
	seen := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, " ")
		room, ok := strings.CutPrefix(path, prefix)
		if !ok {
			continue // package gateway: it composes them all
		}
		room = strings.Split(room, "/")[0]
		allowed, known := rooms[room]
		if !known {
			t.Errorf("gateway/%s is not in the table of rooms (internal/shape/imports_test.go): say which rooms it may import", room)
			continue
		}
		seen++
		for imp := range strings.SplitSeq(imports, ",") {
			if imp == module+"/gateway" {
				t.Errorf("%s imports package gateway: a room never imports the daemon that composes it", path)
				continue
			}
			other, ok := strings.CutPrefix(imp, prefix)
			if !ok {
				continue
			}
			other = strings.Split(other, "/")[0]
			if other != room && !slices.Contains(allowed, other) {
				t.Errorf("%s imports gateway/%s, which the graph does not allow (gateway/%s may import %v): the dependency runs the wrong way; declare a small interface in %s and wire it in package gateway",
					path, other, room, allowed, room)
			}
		}
	}
	if seen < 5 {
		t.Fatalf("go list found %d rooms under gateway/; want the rooms", seen)
	}
}
