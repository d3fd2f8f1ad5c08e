package meta

import (
	"context"
	"errors"
	"time"
)

// Observer is told of every call a store answers: its name (the Store
// method's), how long it took, and its error (nil on success).
type Observer func(op string, took time.Duration, err error)

// Observed returns s with every call but Close told to observe when it
// returns. It is how the daemon measures its store (call latency and
// errors) whatever the backend, without the backends knowing.
func Observed(s Store, observe Observer) Store { return &observed{s, observe} }

// Failed reports whether err, returned by a Store call, is the store
// failing rather than an answer about the records (not found, exists, a
// conflict, a pin held elsewhere, a lost lease, a record too large).
func Failed(err error) bool {
	return err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExists) && !errors.Is(err, ErrConflict) &&
		!errors.Is(err, ErrPinned) && !errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrTooLarge)
}

type observed struct {
	s       Store
	observe Observer
}

func (o *observed) done(op string, start time.Time, err error) { o.observe(op, time.Since(start), err) }

func (o *observed) Close() error { return o.s.Close() }

func (o *observed) CreateBinding(ctx context.Context, b Binding) (Binding, error) {
	start := time.Now()
	v, err := o.s.CreateBinding(ctx, b)
	o.done("CreateBinding", start, err)
	return v, err
}

func (o *observed) UpdateBinding(ctx context.Context, b Binding) (Binding, error) {
	start := time.Now()
	v, err := o.s.UpdateBinding(ctx, b)
	o.done("UpdateBinding", start, err)
	return v, err
}

func (o *observed) GetBinding(ctx context.Context, k ThreadKey) (Binding, error) {
	start := time.Now()
	v, err := o.s.GetBinding(ctx, k)
	o.done("GetBinding", start, err)
	return v, err
}

func (o *observed) ListBindings(ctx context.Context) ([]Binding, error) {
	start := time.Now()
	v, err := o.s.ListBindings(ctx)
	o.done("ListBindings", start, err)
	return v, err
}

func (o *observed) ListBindingsPage(ctx context.Context, tenant *string, after *ThreadKey, limit int) ([]Binding, bool, error) {
	start := time.Now()
	v, more, err := o.s.ListBindingsPage(ctx, tenant, after, limit)
	o.done("ListBindingsPage", start, err)
	return v, more, err
}

func (o *observed) DeleteBinding(ctx context.Context, k ThreadKey, rev uint64) error {
	start := time.Now()
	err := o.s.DeleteBinding(ctx, k, rev)
	o.done("DeleteBinding", start, err)
	return err
}

func (o *observed) PutInspectionMount(ctx context.Context, m InspectionMount) (InspectionMount, error) {
	start := time.Now()
	v, err := o.s.PutInspectionMount(ctx, m)
	o.done("PutInspectionMount", start, err)
	return v, err
}

func (o *observed) ListInspectionMounts(ctx context.Context) ([]InspectionMount, error) {
	start := time.Now()
	v, err := o.s.ListInspectionMounts(ctx)
	o.done("ListInspectionMounts", start, err)
	return v, err
}

func (o *observed) DeleteInspectionMount(ctx context.Context, path string) error {
	start := time.Now()
	err := o.s.DeleteInspectionMount(ctx, path)
	o.done("DeleteInspectionMount", start, err)
	return err
}

func (o *observed) NextJobSeq(ctx context.Context, k ThreadKey) (uint64, error) {
	start := time.Now()
	v, err := o.s.NextJobSeq(ctx, k)
	o.done("NextJobSeq", start, err)
	return v, err
}

func (o *observed) CreateJob(ctx context.Context, j Job) (Job, error) {
	start := time.Now()
	v, err := o.s.CreateJob(ctx, j)
	o.done("CreateJob", start, err)
	return v, err
}

func (o *observed) UpdateJob(ctx context.Context, j Job) (Job, error) {
	start := time.Now()
	v, err := o.s.UpdateJob(ctx, j)
	o.done("UpdateJob", start, err)
	return v, err
}

func (o *observed) GetJob(ctx context.Context, k ThreadKey, seq uint64) (Job, error) {
	start := time.Now()
	v, err := o.s.GetJob(ctx, k, seq)
	o.done("GetJob", start, err)
	return v, err
}

func (o *observed) ListJobs(ctx context.Context, k ThreadKey) ([]Job, error) {
	start := time.Now()
	v, err := o.s.ListJobs(ctx, k)
	o.done("ListJobs", start, err)
	return v, err
}

func (o *observed) DeleteJobs(ctx context.Context, k ThreadKey) error {
	start := time.Now()
	err := o.s.DeleteJobs(ctx, k)
	o.done("DeleteJobs", start, err)
	return err
}

func (o *observed) Heartbeat(ctx context.Context, host string, lease LeaseID, ttl time.Duration) (LeaseID, error) {
	start := time.Now()
	v, err := o.s.Heartbeat(ctx, host, lease, ttl)
	o.done("Heartbeat", start, err)
	return v, err
}

func (o *observed) ListHosts(ctx context.Context) ([]Host, error) {
	start := time.Now()
	v, err := o.s.ListHosts(ctx)
	o.done("ListHosts", start, err)
	return v, err
}

func (o *observed) Pin(ctx context.Context, k ThreadKey, host string, lease LeaseID) (Pin, error) {
	start := time.Now()
	v, err := o.s.Pin(ctx, k, host, lease)
	o.done("Pin", start, err)
	return v, err
}

func (o *observed) GetPin(ctx context.Context, k ThreadKey) (Pin, error) {
	start := time.Now()
	v, err := o.s.GetPin(ctx, k)
	o.done("GetPin", start, err)
	return v, err
}

func (o *observed) ListPins(ctx context.Context) ([]Pin, error) {
	start := time.Now()
	v, err := o.s.ListPins(ctx)
	o.done("ListPins", start, err)
	return v, err
}

func (o *observed) Unpin(ctx context.Context, k ThreadKey, host string) error {
	start := time.Now()
	err := o.s.Unpin(ctx, k, host)
	o.done("Unpin", start, err)
	return err
}

func (o *observed) GetHistory(ctx context.Context, k ThreadKey) (History, error) {
	start := time.Now()
	v, err := o.s.GetHistory(ctx, k)
	o.done("GetHistory", start, err)
	return v, err
}

func (o *observed) PutHistory(ctx context.Context, h History) (History, error) {
	start := time.Now()
	v, err := o.s.PutHistory(ctx, h)
	o.done("PutHistory", start, err)
	return v, err
}

func (o *observed) DeleteHistory(ctx context.Context, k ThreadKey) error {
	start := time.Now()
	err := o.s.DeleteHistory(ctx, k)
	o.done("DeleteHistory", start, err)
	return err
}

func (o *observed) ListHistories(ctx context.Context, tenant string) ([]History, error) {
	start := time.Now()
	v, err := o.s.ListHistories(ctx, tenant)
	o.done("ListHistories", start, err)
	return v, err
}

func (o *observed) GetClaim(ctx context.Context, name string) (Claim, error) {
	start := time.Now()
	v, err := o.s.GetClaim(ctx, name)
	o.done("GetClaim", start, err)
	return v, err
}

func (o *observed) PutClaim(ctx context.Context, c Claim) (Claim, error) {
	start := time.Now()
	v, err := o.s.PutClaim(ctx, c)
	o.done("PutClaim", start, err)
	return v, err
}
