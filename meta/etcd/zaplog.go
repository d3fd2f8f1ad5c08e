package etcd

import (
	"slices"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap/zapcore"
)

// zapHclog is a zap core that writes to hclog, so the etcd client's lines
// land in warren's log with its format and level. The client reports
// routine work (retries, balancer changes) at info and debug; those go one
// level down, as Badger's do, so a daemon's log at info stays quiet.
type zapHclog struct {
	l      hclog.Logger
	fields []zapcore.Field
}

var _ zapcore.Core = zapHclog{}

func hclogLevel(l zapcore.Level) hclog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return hclog.Trace
	case l < zapcore.WarnLevel:
		return hclog.Debug
	case l < zapcore.ErrorLevel:
		return hclog.Warn
	}
	return hclog.Error
}

func (c zapHclog) Enabled(l zapcore.Level) bool {
	switch hclogLevel(l) {
	case hclog.Trace:
		return c.l.IsTrace()
	case hclog.Debug:
		return c.l.IsDebug()
	case hclog.Warn:
		return c.l.IsWarn()
	}
	return c.l.IsError()
}

func (c zapHclog) With(fields []zapcore.Field) zapcore.Core {
	return zapHclog{l: c.l, fields: append(slices.Clip(c.fields), fields...)}
}

func (c zapHclog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c zapHclog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	var args []any
	for _, f := range slices.Concat(c.fields, fields) {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields {
			args = append(args, k, v)
		}
	}
	c.l.Log(hclogLevel(e.Level), e.Message, args...)
	return nil
}

func (zapHclog) Sync() error { return nil }
