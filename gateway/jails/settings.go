package jails

import (
	"cmp"
	"fmt"
	"strings"

	"warren/jail"
	"warren/meta"
)

// JailConfig is the jail a thread with settings s gets on this gateway,
// over its workspace (the thread's mount) and its home folder: its
// settings, else the daemon's defaults (Config), else the jail's.
func (js *Jails) JailConfig(s meta.Settings, workspace, home string) jail.Config {
	mode := cmp.Or(s.Network, js.cfg.Network, "none")
	var nameserver string
	if js.cfg.Networks != nil {
		nameserver = js.cfg.Networks.Nameserver(mode)
	}
	return jail.Config{
		Workspace: workspace, Home: home, Binary: js.cfg.Binary, Rlimits: js.cfg.Rlimits,
		Network: mode, Nameserver: nameserver,
		MemoryBytes: cmp.Or(s.MemoryBytes, js.cfg.MemoryBytes, jail.DefaultMemoryBytes),
		MaxProcs:    cmp.Or(s.MaxProcs, js.cfg.MaxProcs, jail.DefaultMaxProcs),
		CPUMillis:   cmp.Or(s.CPUMillis, js.cfg.CPUMillis),
		Base:        js.base,
	}
}

// Env is the whole environment of a command of a thread with settings s
// in a jail on img (nil: the host's folders): jail.EnvFor's, with the
// PATH of Config.Path on the host's folders unless the thread or the call
// set one. A jail on an image has the image's PATH: Config.Path names
// folders of the host's, which the image's root has not.
func (js *Jails) Env(img *jail.Image, s meta.Settings, call map[string]string) ([]string, error) {
	env, err := jail.EnvFor(img, s.Env, call)
	if err != nil {
		return nil, err
	}
	if img != nil {
		return env, nil
	}
	if _, ok := s.Env["PATH"]; ok {
		return env, nil
	}
	if _, ok := call["PATH"]; ok {
		return env, nil
	}
	path := cmp.Or(js.cfg.Path, jail.Path)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + path
		}
	}
	return env, nil
}

// StartBase makes the mount namespace the jails are forked from
// (jail.Base): a copy of the daemon's without the threads' mounts, so that
// a jail's start does not copy one mount per bound thread. It holds no
// mount of the folders in hide (the data folder, the workspaces, the
// snapshots), and none made after it. Without it (no privilege for it)
// jails are as safe, and copy the daemon's namespace whole. Call it at
// Start, before any jail starts.
func (js *Jails) StartBase(hide ...string) {
	base, err := jail.NewBase(jail.BaseConfig{Binary: js.cfg.Binary, Hide: hide})
	if err != nil {
		js.log.Warn("jails start from the daemon's own mount namespace, copying every mount of it: no base namespace", "error", err)
		return
	}
	js.log.Debug("jails start from a base namespace", "mounts", base.Mounts())
	js.base = base
}

// Base is the jails' base namespace, nil if there is none.
func (js *Jails) Base() *jail.Base { return js.base }

// CloseBase lets the jails' base namespace go, if any, once no jail
// starts.
func (js *Jails) CloseBase() {
	if js.base == nil {
		return
	}
	if err := js.base.Close(); err != nil {
		js.log.Warn("close the jails' base namespace", "error", err)
	}
}

// SameJail says whether two jail configurations make the same sandbox, so
// that new settings can apply without restarting a running jail.
func SameJail(a, b jail.Config) bool {
	return a.Network == b.Network && a.MemoryBytes == b.MemoryBytes && a.MaxProcs == b.MaxProcs &&
		a.CPUMillis == b.CPUMillis
}

// CPUBound says a jail's CPU bound in words.
func CPUBound(m int) string {
	if m == 0 {
		return "no CPU bound"
	}
	return fmt.Sprintf("%d thousandths of a CPU", m)
}
