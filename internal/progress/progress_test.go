package progress

import (
	"context"
	"testing"
)

// TestReport: without a Func, reports go nowhere; with one, each reaches
// it; WithTotal fills an unknown total with its estimate, at least done.
func TestReport(t *testing.T) {
	Report(context.Background(), "read", 1, 0) // no Func: nothing
	Of(context.Background())(Frame{Done: 1})

	var got []Frame
	ctx := With(context.Background(), func(f Frame) { got = append(got, f) })
	Report(ctx, "read", 1, 0)
	est := WithTotal(ctx, 10)
	Report(est, "read", 2, 0)
	Report(est, "read", 12, 0)
	Of(est)(Frame{Done: 3, Total: 5, Phase: "write"})
	want := []Frame{{1, 0, "read"}, {2, 10, "read"}, {12, 12, "read"}, {3, 5, "write"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("report %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if WithTotal(context.Background(), 10) != context.Background() {
		t.Errorf("WithTotal without a Func made a new context")
	}
}

// TestSink: a Sink keeps the newest report and signals once for many.
func TestSink(t *testing.T) {
	s := NewSink()
	s.Report(Frame{Done: 1})
	s.Report(Frame{Done: 2, Total: 3, Phase: "write"})
	<-s.Ready
	if got := s.Take(); got != (Frame{Done: 2, Total: 3, Phase: "write"}) {
		t.Errorf("Take: %+v, want the newest", got)
	}
	select {
	case <-s.Ready:
		t.Errorf("a second signal for reports taken")
	default:
	}
}
