package jails

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/jail"
	"warren/meta"
)

// command is a Command for the registry's tests.
type command struct {
	k        meta.ThreadKey
	job      string
	mu       sync.Mutex
	stopping string
}

func (c *command) Thread() meta.ThreadKey { return c.k }
func (c *command) Job() string            { return c.job }
func (c *command) Stopping(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopping = why
}

func (c *command) why() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopping
}

func newTestJails() *Jails { return New(Config{Max: 4, Logger: hclog.NewNullLogger()}) }

// TestRestoreMarks: a command registered before a restore marks its
// thread is counted by the restore; one that comes after is refused with
// busy while the mark holds, and starts again once it is lifted. Another
// thread is not concerned.
func TestRestoreMarks(t *testing.T) {
	js := newTestJails()
	k1, k2 := meta.ThreadKey{Tenant: "acme", Thread: "t1"}, meta.ThreadKey{Tenant: "acme", Thread: "t2"}
	id1, err := js.StartExec(&command{k: k1})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := js.StartExec(&command{k: k2})
	if err != nil {
		t.Fatal(err)
	}
	if ids := js.BeginRestore(k1, "an undo"); !slices.Equal(ids, []string{id1}) {
		t.Errorf("the restore counts %v, want [%s]", ids, id1)
	}
	if why, ok := js.RestoringWhy(k1); !ok || why != "an undo" {
		t.Errorf("RestoringWhy = %q, %v", why, ok)
	}
	if _, err := js.StartExec(&command{k: k1}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("a command during the restore: %v, want busy", err)
	}
	if _, err := js.StartExec(&command{k: k2}); err != nil {
		t.Errorf("a command of another thread: %v", err)
	}
	if _, ok := js.RestoringWhy(k2); ok {
		t.Error("another thread is marked")
	}
	js.EndRestore(k1)
	if _, err := js.StartExec(&command{k: k1}); err != nil {
		t.Errorf("a command after the restore: %v", err)
	}
	if js.Exec(id2) == nil || js.Exec("exec-0") != nil {
		t.Error("Exec finds the wrong commands")
	}
}

// TestRestoreRace: whichever of a command's registration and a restore's
// mark comes first, one of the two sees the other.
func TestRestoreRace(t *testing.T) {
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	for range 200 {
		js := newTestJails()
		var counted []string
		var startErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, startErr = js.StartExec(&command{k: k}) })
		wg.Go(func() { counted = js.BeginRestore(k, "a revert") })
		wg.Wait()
		if (startErr == nil) == (len(counted) == 0) {
			t.Fatalf("the command started: %v; the restore counted %v", startErr, counted)
		}
	}
}

// TestEndedExecs: an ended command is remembered with its thread and the
// job it became, the newest endedExecsKept of them; NoteStopping reaches
// the running commands of its thread only.
func TestEndedExecs(t *testing.T) {
	js := newTestJails()
	k1, k2 := meta.ThreadKey{Tenant: "acme", Thread: "t1"}, meta.ThreadKey{Tenant: "acme", Thread: "t2"}
	c1, c2 := &command{k: k1}, &command{k: k2}
	id1, _ := js.StartExec(c1)
	id2, _ := js.StartExec(c2)
	if !js.Runs(k1) || !js.Runs(k2) {
		t.Error("Runs does not see the commands")
	}
	js.NoteStopping(k1, "its thread was deleted")
	if c1.why() != "its thread was deleted" || c2.why() != "" {
		t.Errorf("stopping marks: %q, %q", c1.why(), c2.why())
	}
	c1.job = "bash-3"
	if got := js.EndExec(id1); got != c1 {
		t.Errorf("EndExec returned %v", got)
	}
	if js.EndExec(id1) != nil || js.Exec(id1) != nil || js.Runs(k1) {
		t.Error("an ended command is still registered")
	}
	if e, ok := js.Ended(id1); !ok || e != (EndedExec{Thread: k1, Job: "bash-3"}) {
		t.Errorf("Ended(%s) = %+v, %v", id1, e, ok)
	}
	js.EndExec(id2)
	for i := range endedExecsKept {
		id, _ := js.StartExec(&command{k: k2})
		js.EndExec(id)
		if i == 0 {
			if _, ok := js.Ended(id2); !ok {
				t.Errorf("%s forgotten too early", id2)
			}
		}
	}
	if _, ok := js.Ended(id1); ok {
		t.Errorf("%s is remembered past the newest %d", id1, endedExecsKept)
	}
	if _, ok := js.Ended(id2); ok {
		t.Errorf("%s is remembered past the newest %d", id2, endedExecsKept)
	}
}

// TestNoJails: a set without a jail answers its figures, and the bound
// counts places.
func TestNoJails(t *testing.T) {
	js := newTestJails()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t1"}
	if tj, _ := js.Get(k); tj != nil || js.JailOf(k) != nil || js.Count() != 0 {
		t.Error("a jail in an empty set")
	}
	if _, ok := js.LastUsed(k); ok {
		t.Error("LastUsed of no jail")
	}
	for i := range 4 {
		if err := js.reserve(meta.ThreadKey{Tenant: "acme", Thread: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if live, max := js.Live(); live != 4 || max != 4 {
		t.Errorf("Live = %d, %d; want 4, 4", live, max)
	}
	js.SetJobs(noJobs{})
	err := js.reserve(k)
	var be *BoundError
	if !errors.As(err, &be) || !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("past the bound: %v, want a BoundError (unavailable)", err)
	}
	js.unreserve()
	if live, _ := js.Live(); live != 3 {
		t.Errorf("Live = %d after unreserve, want 3", live)
	}
	js.CloseAll()
	if err := js.add(k, &ThreadJail{}); !errors.Is(err, api.ErrClosed) {
		t.Errorf("a jail after CloseAll: %v, want closed", err)
	}
}

type noJobs struct{}

func (noJobs) Busy() map[meta.ThreadKey]bool { return nil }
func (noJobs) Closing(meta.ThreadKey) bool   { return false }

// TestCommandLine: a command's folder stays in the workspace, and a
// terminal's TERM is a terminal type's name, added unless set.
func TestCommandLine(t *testing.T) {
	for cwd, want := range map[string]string{"": "", "src": jail.Workspace + "/src", jail.Workspace + "/a/../b": jail.Workspace + "/b"} {
		if got, err := execCwd(cwd); err != nil || got != want {
			t.Errorf("execCwd(%q) = %q, %v; want %q", cwd, got, err, want)
		}
	}
	for _, bad := range []string{"..", "/etc", jail.Workspace + "/../x"} {
		if _, err := execCwd(bad); !errors.Is(err, api.ErrOutside) {
			t.Errorf("execCwd(%q): %v, want outside", bad, err)
		}
	}
	if term, err := ExecTerm(api.ExecRequest{Tty: true}); err != nil || term != api.DefaultTerm {
		t.Errorf("default TERM: %q, %v", term, err)
	}
	for _, req := range []api.ExecRequest{{Term: "xterm"}, {Tty: true, Term: "x term"}} {
		if _, err := ExecTerm(req); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("ExecTerm(%+v): %v, want invalid", req, err)
		}
	}
	if env := WithTerm([]string{"A=1"}, "vt100"); !slices.Equal(env, []string{"A=1", "TERM=vt100"}) {
		t.Errorf("WithTerm: %v", env)
	}
	if env := WithTerm([]string{"TERM=dumb"}, "vt100"); !slices.Equal(env, []string{"TERM=dumb"}) {
		t.Errorf("WithTerm over a TERM of the thread's: %v", env)
	}
	for _, c := range []struct {
		daemon  time.Duration
		seconds int64
		want    time.Duration
	}{{0, 0, DefaultJailIdle}, {time.Minute, 0, time.Minute}, {-1, 0, 0}, {time.Minute, 5, 5 * time.Second}, {time.Minute, -1, 0}} {
		if got := IdleOf(c.daemon, c.seconds, DefaultJailIdle); got != c.want {
			t.Errorf("IdleOf(%v, %d) = %v, want %v", c.daemon, c.seconds, got, c.want)
		}
	}
}
