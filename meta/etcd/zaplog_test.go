package etcd

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
)

// TestZapHclog checks the bridge from the etcd client's zap lines to
// hclog: fields kept in order, info and debug one level down.
func TestZapHclog(t *testing.T) {
	var out strings.Builder
	l := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Debug, DisableTime: true})
	z := zap.New(zapHclog{l: l.Named("etcd")}).With(zap.String("target", "t1"))
	z.Debug("hidden: hclog at debug drops zap's debug, which is trace here")
	z.Info("retrying", zap.Int("attempt", 2))
	z.Warn("slow", zap.Duration("took", 0))
	z.Error("failed")
	want := "[DEBUG] etcd: retrying: target=t1 attempt=2\n" +
		"[WARN]  etcd: slow: target=t1 took=0s\n" +
		"[ERROR] etcd: failed: target=t1\n"
	if got := out.String(); got != want {
		t.Errorf("hclog got:\n%s\nwant:\n%s", got, want)
	}
}
