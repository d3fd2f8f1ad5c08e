package integration

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// testSocketGID is the socket's group in the unit's test: a number (no
// group by that name need exist), not the daemon's own.
const testSocketGID = 4242

// unitFile is the systemd unit `make install` installs.
const unitFile = "../docs/deploy/warren.service"

// unitLines returns the values of key= in the unit's [Service] section,
// each split into words (the unit quotes nothing).
func unitLines(t *testing.T, key string) [][]string {
	t.Helper()
	f, err := os.Open(unitFile)
	must(t, err)
	defer f.Close()
	var out [][]string
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if v, ok := strings.CutPrefix(line, key+"="); ok && section == "[Service]" {
			out = append(out, strings.Fields(v))
		}
	}
	must(t, sc.Err())
	return out
}

// forTest rewrites the flags of a unit's command line for a test's own
// daemon: the data folder is the harness's (dropped here), the socket's
// group the test's own, the metrics port a free one. Every other flag is
// kept as the unit has it.
func forTest(t *testing.T, args []string) []string {
	t.Helper()
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--data":
			i++ // the harness gives its own
		case "--socket-group":
			i++
			out = append(out, "--socket-group", strconv.Itoa(testSocketGID))
		case "--metrics-addr":
			i++
			out = append(out, "--metrics-addr", "127.0.0.1:"+strconv.Itoa(freePort(t)))
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// TestUnitStartsTheDaemon runs the unit's ExecStartPre (warren doctor)
// and ExecStart (warren serve) lines with the binaries under test: the
// doctor passes on this machine, and the daemon serves with every flag
// the unit gives it (a flag it did not know would stop it), answering its
// probes on the metrics address.
func TestUnitStartsTheDaemon(t *testing.T) {
	pre, start := unitLines(t, "ExecStartPre"), unitLines(t, "ExecStart")
	if len(pre) != 1 || len(start) != 1 {
		t.Fatalf("the unit has %d ExecStartPre and %d ExecStart lines, want one each", len(pre), len(start))
	}
	for _, line := range [][]string{pre[0], start[0]} {
		if line[0] != "/usr/local/bin/warren" {
			t.Errorf("the unit runs %s; make install puts warren in /usr/local/bin", line[0])
		}
	}
	if pre[0][1] != "doctor" || start[0][1] != "serve" {
		t.Fatalf("ExecStartPre %v, ExecStart %v: want warren doctor, then warren serve", pre[0], start[0])
	}

	// The doctor, as the unit runs it, with this test's data folder.
	data := filepath.Join(t.TempDir(), "data")
	doctor := exec.Command(warrenBin, append(append([]string{"doctor"}, forTest(t, pre[0][2:])...), "--data", data)...)
	out, err := doctor.CombinedOutput()
	if err != nil {
		t.Fatalf("warren doctor as the unit runs it: %v\n%s", err, out)
	}

	args := forTest(t, start[0][2:])
	d := newDaemon(t, args...)
	var metrics string
	for i, a := range args {
		if a == "--metrics-addr" {
			metrics = "http://" + args[i+1]
		}
	}
	if metrics == "" {
		t.Fatal("the unit serves no metrics address")
	}
	httpGet(t, http.DefaultClient, metrics+"/healthz", http.StatusOK)
	httpGet(t, http.DefaultClient, metrics+"/readyz", http.StatusOK)
	d.bind("default", "t")
	fi, err := os.Stat(d.socket)
	must(t, err)
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Gid != testSocketGID {
		t.Errorf("socket mode %v, group %d; want 0660, group %d", fi.Mode().Perm(), st.Gid, testSocketGID)
	}
}
