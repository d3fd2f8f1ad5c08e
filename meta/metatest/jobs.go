package metatest

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"warren/meta"
)

func testJobNumbers(t *testing.T, s meta.Store) {
	ctx := t.Context()
	a := meta.ThreadKey{Tenant: "acme", Thread: "t"}
	b := meta.ThreadKey{Tenant: "acme", Thread: "t\x00"} // a near neighbour
	for i, k := range []meta.ThreadKey{a, a, b, a, b} {
		want := map[int]uint64{0: 1, 1: 2, 2: 1, 3: 3, 4: 2}[i]
		got, err := s.NextJobSeq(ctx, k)
		if err != nil || got != want {
			t.Fatalf("call %d: NextJobSeq(%q) = %d, %v; want %d", i, k, got, err, want)
		}
	}
	// Deleting a's jobs restarts a's numbers and leaves b's alone.
	if err := s.DeleteJobs(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.NextJobSeq(ctx, a); err != nil || got != 1 {
		t.Errorf("after DeleteJobs: NextJobSeq(a) = %d, %v; want 1", got, err)
	}
	if got, err := s.NextJobSeq(ctx, b); err != nil || got != 3 {
		t.Errorf("after DeleteJobs(a): NextJobSeq(b) = %d, %v; want 3", got, err)
	}
}

func job(k meta.ThreadKey, seq uint64) meta.Job {
	return meta.Job{
		ThreadKey: k, Seq: seq, Label: "npm run dev", User: "ana",
		HostID: "host-1", Instance: "i-1", BackendID: "4242",
		StartedAt: boundAt, Running: true,
	}
}

func sameJob(t testing.TB, what string, got, want meta.Job) {
	t.Helper()
	got.Revision, want.Revision = 0, 0
	if !got.StartedAt.Equal(want.StartedAt) || !got.EndedAt.Equal(want.EndedAt) {
		t.Errorf("%s: times %v/%v, want %v/%v", what, got.StartedAt, got.EndedAt, want.StartedAt, want.EndedAt)
	}
	got.StartedAt, want.StartedAt, got.EndedAt, want.EndedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func testJobRecords(t *testing.T, s meta.Store) {
	ctx := t.Context()
	k := meta.ThreadKey{Tenant: "acme", Thread: "t-1"}
	other := meta.ThreadKey{Tenant: "acme", Thread: "t-10"}
	if list, err := s.ListJobs(ctx, k); err != nil || len(list) != 0 {
		t.Fatalf("ListJobs of a new thread = %v, %v; want none", list, err)
	}
	// Numbers past 255 catch an order that is not numeric.
	var created []meta.Job
	for _, seq := range []uint64{2, 300, 1} {
		j, err := s.CreateJob(ctx, job(k, seq))
		if err != nil {
			t.Fatalf("CreateJob %d: %v", seq, err)
		}
		if j.Revision == 0 {
			t.Fatalf("CreateJob %d: no revision", seq)
		}
		created = append(created, j)
	}
	if _, err := s.CreateJob(ctx, job(other, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(ctx, job(k, 2)); !errors.Is(err, meta.ErrExists) {
		t.Errorf("CreateJob of an existing job: %v, want ErrExists", err)
	}

	ended := created[0]
	code := 3
	ended.Running, ended.ExitCode, ended.EndedAt = false, &code, boundAt.Add(time.Minute)
	ended.Note = "Background job bash-2 stopped when the host restarted."
	updated, err := s.UpdateJob(ctx, ended)
	if err != nil {
		t.Fatalf("UpdateJob: %v", err)
	}
	if updated.Revision <= ended.Revision {
		t.Errorf("UpdateJob: revision %d, not above %d", updated.Revision, ended.Revision)
	}
	// A second writer holding the old revision loses.
	if _, err := s.UpdateJob(ctx, ended); !errors.Is(err, meta.ErrConflict) {
		t.Errorf("UpdateJob with a stale revision: %v, want ErrConflict", err)
	}
	if _, err := s.UpdateJob(ctx, job(k, 7)); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("UpdateJob of a missing job: %v, want ErrNotFound", err)
	}
	got, err := s.GetJob(ctx, k, 2)
	if err != nil {
		t.Fatal(err)
	}
	sameJob(t, "GetJob after update", got, ended)
	if _, err := s.GetJob(ctx, k, 9); !errors.Is(err, meta.ErrNotFound) {
		t.Errorf("GetJob of a missing job: %v, want ErrNotFound", err)
	}

	list, err := s.ListJobs(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, j := range list {
		seqs = append(seqs, j.Seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2, 300}) {
		t.Fatalf("ListJobs: numbers %v, want [1 2 300]", seqs)
	}
	sameJob(t, "listed job 2", list[1], ended)
	sameJob(t, "listed job 300", list[2], job(k, 300))

	if err := s.DeleteJobs(ctx, k); err != nil {
		t.Fatal(err)
	}
	if list, err := s.ListJobs(ctx, k); err != nil || len(list) != 0 {
		t.Errorf("ListJobs after DeleteJobs = %d jobs, %v", len(list), err)
	}
	if list, err := s.ListJobs(ctx, other); err != nil || len(list) != 1 {
		t.Errorf("ListJobs of another thread after DeleteJobs = %d jobs, %v; want 1", len(list), err)
	}
}

func testConcurrentJobNumbers(t *testing.T, s meta.Store) {
	k := meta.ThreadKey{Tenant: "acme", Thread: "busy"}
	const n = 16
	got := make([]uint64, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = s.NextJobSeq(t.Context(), k) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("concurrent NextJobSeq gave %v; want 1..%d once each", got, n)
		}
	}
}
