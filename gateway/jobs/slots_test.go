package jobs

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"warren/api"
	"warren/gateway/jails"
	"warren/meta"
)

// TestJobSlots: a thread takes at most its limit of slots (its settings,
// else the daemon's, else DefaultMaxJobs), none while its workspace is
// being restored, and none after Close; a thread with a slot taken is
// busy for the jails; Wait returns once every slot is given back.
func TestJobSlots(t *testing.T) {
	js := New(Config{MaxJobs: 2, Jails: jails.New(jails.Config{Logger: hclog.NewNullLogger()}), Logger: hclog.NewNullLogger()})
	k1, k2 := meta.ThreadKey{Tenant: "acme", Thread: "t1"}, meta.ThreadKey{Tenant: "acme", Thread: "t2"}
	for range 2 {
		if err := js.takeJobSlotIfNotRestoring(k1, meta.Settings{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := js.takeJobSlot(k1, meta.Settings{}); !errors.Is(err, api.ErrJobLimit) {
		t.Errorf("a third slot with the daemon's limit of 2: %v, want job_limit", err)
	}
	if err := js.takeJobSlot(k1, meta.Settings{MaxJobs: 3}); err != nil {
		t.Errorf("a third slot with the thread's limit of 3: %v", err)
	}
	if n, m := js.Running(k1), js.Count(); n != 3 || m != 3 {
		t.Errorf("Running = %d, Count = %d; want 3, 3", n, m)
	}
	if busy := js.Busy(); !busy[k1] || busy[k2] {
		t.Errorf("Busy = %v, want t1 only", busy)
	}
	if ids := js.RunningIDs(k1); len(ids) != 3 || ids[0] != "a job being started" {
		t.Errorf("RunningIDs = %v", ids)
	}

	js.jails.BeginRestore(k2, "an undo")
	if err := js.takeJobSlotIfNotRestoring(k2, meta.Settings{}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("a slot during a restore: %v, want busy", err)
	}
	if n := js.Running(k2); n != 0 {
		t.Errorf("the refused slot is held: %d", n)
	}
	js.jails.EndRestore(k2)

	js.SetClosing(k1, true)
	if !js.Closing(k1) || js.Closing(k2) {
		t.Error("Closing is not as set")
	}
	js.Close()
	if err := js.takeJobSlot(k2, meta.Settings{}); !errors.Is(err, api.ErrClosed) {
		t.Errorf("a slot after Close: %v, want closed", err)
	}
	waited := make(chan struct{})
	go func() {
		js.Wait()
		close(waited)
	}()
	for range 3 {
		select {
		case <-waited:
			t.Fatal("Wait returned while slots are taken")
		case <-time.After(10 * time.Millisecond):
		}
		js.releaseJobSlot(k1)
	}
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return once every slot was given back")
	}
	if n := js.Running(k1); n != 0 {
		t.Errorf("Running = %d after the releases", n)
	}
}

// TestJobIDs: ids are bash-N, N from 1, written one way only.
func TestJobIDs(t *testing.T) {
	if ID(7) != "bash-7" {
		t.Errorf("ID(7) = %q", ID(7))
	}
	if seq, err := parseJobID("bash-12"); err != nil || seq != 12 {
		t.Errorf("parseJobID(bash-12) = %d, %v", seq, err)
	}
	for _, bad := range []string{"bash-0", "bash-012", "bash-", "job-1", "bash-1x", "bash--1"} {
		if _, err := parseJobID(bad); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("parseJobID(%q): %v, want invalid", bad, err)
		}
	}
}
