package jails

import (
	"context"
	"fmt"
	"strings"

	"warren/api"
	"warren/gateway/call"
	"warren/gateway/threads"
	"warren/jail"
	"warren/meta"
)

// What the threads ask of the jails when a thread is bound again with new
// settings, or starts in a fresh workspace (package threads, Jails).

// Seed runs script in the jail of b's thread, started if need be, as the
// seed of a fresh workspace; it says how the script ended: nil for exit 0.
// The thread lock must be held.
func (js *Jails) Seed(ctx context.Context, b meta.Binding, script string) error {
	tj, err := js.For(ctx, b.ThreadKey, b)
	if err != nil {
		return err
	}
	defer js.Unhold(tj) // held while the seed runs: it is no registered command
	env, err := js.Env(tj.jail.Image(), b.Settings, nil)
	if err != nil {
		return err
	}
	var out strings.Builder
	code, err := tj.jail.Run(ctx, jail.Cmd{Script: script, Env: env, Stdout: &out, Stderr: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, call.Clip(out.String()))
	}
	return err
}

// Resettle checks that k's running jail, if it has one, can take
// settings s without a restart: its network and limits stay as they
// are (a jail is not restarted behind its commands' backs; the thread is
// closed first). apply records s as the running jail's settings, once
// the binding has them (new variables and job limits apply to the next
// command). The thread lock must be held.
func (js *Jails) Resettle(k meta.ThreadKey, s meta.Settings) (apply func(), err error) {
	tj, running := js.Get(k)
	if tj == nil {
		return func() {}, nil
	}
	if running.Image != s.Image || running.ImageDigest != s.ImageDigest {
		was := running.Image
		if was == "" {
			was = "the host's folders"
		}
		return nil, fmt.Errorf("%w: the jail of thread %s runs on %s; close the thread before you change its image (the next jail starts on the new one)",
			api.ErrConflict, call.KeyName(k), was)
	}
	now, next := js.JailConfig(running, "", ""), js.JailConfig(s, "", "")
	if !SameJail(now, next) {
		return nil, fmt.Errorf("%w: the jail of thread %s runs with network %s, %d bytes of memory, %d processes and %s; "+
			"close the thread before you change its network or limits", api.ErrConflict, call.KeyName(k), now.Network, now.MemoryBytes, now.MaxProcs, CPUBound(now.CPUMillis))
	}
	// New egress rules (or rate, or bound of connections) apply to the
	// running jail at once.
	if js.cfg.Networks != nil {
		if err := js.cfg.Networks.Apply(k, tj.jail, running, s); err != nil {
			return nil, fmt.Errorf("new network rules for thread %s: %w", call.KeyName(k), err)
		}
	}
	return func() { js.SetSettings(tj, threads.CloneSettings(s)) }, nil
}
