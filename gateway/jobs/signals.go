package jobs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"warren/api"
	"warren/gateway/call"
	"warren/meta"
)

// Signals to running commands and jobs: POST .../exec/{id}/signal and
// POST .../jobs/{job}/signal with {"signal": NAME}.
//
// Who gets a signal: the command's whole process tree in its jail, the
// processes that a job's stop reaches, by the same path (jail.Cmd.Signals,
// which the jail's Run serves):
//
//   - in a jail with a cgroup (the default), every process of the
//     command's own cgroup (jail/tree_linux.go): its session and process
//     group, and every descendant that left them (setsid, a double fork),
//     since a process cannot leave the cgroup it was born in. The gateway
//     signals each from the host, by the pids the cgroup lists, skipping
//     the jail's init;
//   - in a jail bounded by rlimits (no cgroup, so no trees), the
//     command's process group, signalled by the jail's init inside the
//     jail's pid namespace: a descendant that made a session of its own
//     is not reached there.
//
// Nothing outside the jail is ever signalled: a command's cgroup holds
// only processes born of its fork in the jail, and the init sees only
// the jail's pid namespace. The jail's init is never signalled, nor
// another command of the jail.
//
// A signal sent before the command's first answer from the init (it is
// still being forked) waits for it (jail.Run); of several that early,
// the last, or SIGKILL, is sent. SIGKILL to a job ends it as a stop ends
// it, at once: the call answers once its end is recorded, with exit 137
// and the note ClientKillNote.

// Bounds of the signals of kill -l.
const (
	sigRTMin = 34 // SIGRTMIN as kill -l lists it: the C library keeps 32 and 33
	sigRTMax = 64
)

// parseSignal reads a signal as the API takes it: a name kill -l lists,
// with or without "SIG", in any case ("SIGINT", "int", "RTMIN+3"), or a
// number from 1 to 64. It returns the signal and its name, as signalName
// gives it.
func parseSignal(text string) (syscall.Signal, string, error) {
	if text == "" {
		return 0, "", fmt.Errorf("%w: signal is required (a name as kill -l lists it, or a number from 1 to %d)", api.ErrInvalid, sigRTMax)
	}
	if digits := strings.TrimPrefix(text, "-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
		n, err := strconv.Atoi(text)
		if err == nil && n == 0 {
			return 0, "", fmt.Errorf("%w: signal 0 sends nothing (it only checks that a process exists); give a signal from 1 to %d", api.ErrInvalid, sigRTMax)
		}
		if err != nil || n < 1 || n > sigRTMax {
			return 0, "", fmt.Errorf("%w: signal %s is not from 1 to %d", api.ErrInvalid, call.Quote(text), sigRTMax)
		}
		return syscall.Signal(n), signalName(syscall.Signal(n)), nil
	}
	name := strings.ToUpper(text)
	name = strings.TrimPrefix(name, "SIG")
	if sig := signalByName(name); sig != 0 {
		return sig, signalName(sig), nil
	}
	return 0, "", fmt.Errorf("%w: unknown signal %s (give a name as kill -l lists it, like SIGTERM or INT, or a number from 1 to %d)", api.ErrInvalid, call.Quote(text), sigRTMax)
}

// signalByName returns the signal of name, upper case without "SIG", or 0.
func signalByName(name string) syscall.Signal {
	// The real-time signals: RTMIN, RTMIN+n, RTMAX-n, RTMAX, as far as
	// they stay between the two.
	for _, rt := range []struct {
		name string
		sig  int
		step int
	}{{"RTMIN", sigRTMin, 1}, {"RTMAX", sigRTMax, -1}} {
		rest, ok := strings.CutPrefix(name, rt.name)
		if !ok {
			continue
		}
		if rest == "" {
			return syscall.Signal(rt.sig)
		}
		sign := "+"
		if rt.step < 0 {
			sign = "-"
		}
		digits, ok := strings.CutPrefix(rest, sign)
		n, err := strconv.Atoi(digits)
		if !ok || err != nil || strings.Trim(digits, "0123456789") != "" {
			return 0
		}
		if sig := rt.sig + rt.step*n; sig >= sigRTMin && sig <= sigRTMax {
			return syscall.Signal(sig)
		}
		return 0
	}
	if name == "" {
		return 0
	}
	// The system's names of the classic signals, 1 to 31.
	return unix.SignalNum("SIG" + name)
}

// signalName is sig's name as kill -l gives it, with "SIG": SIGINT,
// SIGRTMIN+2, SIGRTMAX-1; SIG32 and SIG33, which kill -l leaves out.
func signalName(sig syscall.Signal) string {
	n := int(sig)
	switch {
	case n == sigRTMin:
		return "SIGRTMIN"
	case n == sigRTMax:
		return "SIGRTMAX"
	case n > sigRTMin && n <= (sigRTMin+sigRTMax)/2:
		return "SIGRTMIN+" + strconv.Itoa(n-sigRTMin)
	case n > sigRTMin && n < sigRTMax:
		return "SIGRTMAX-" + strconv.Itoa(sigRTMax-n)
	}
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "SIG" + strconv.Itoa(n)
}

// ClientKillNote is the note of a job a client ended with SIGKILL.
func ClientKillNote(id string) string {
	return fmt.Sprintf("Background job %s was killed by SIGKILL at the client's request.", id)
}

// signalExec sends sig to the tree of running command p.Exec of p's
// thread: 404 for a command this gateway never ran there (or forgot,
// endedExecsKept ago), 409 for one that ended or became a job.
func (js *Jobs) signalExec(ctx context.Context, p call.Params, sig syscall.Signal) error {
	k, err := call.ThreadKey(p.Tenant, p.Thread)
	if err != nil {
		return err
	}
	if re, _ := js.jails.Exec(p.Exec).(*runningExec); re != nil && re.key == k {
		// Marked before it is sent: the command's end may follow at once.
		re.signalled.Store(true)
		return sendSignal(ctx, re.signals, sig, re.ended, func() error {
			return js.execNotRunning(p, k)
		})
	}
	return js.execNotRunning(p, k)
}

// execNotRunning is the refusal of a signal to command p.Exec of thread k,
// which does not run.
func (js *Jobs) execNotRunning(p call.Params, k meta.ThreadKey) error {
	e, ok := js.jails.Ended(p.Exec)
	switch {
	case ok && e.Thread == k && e.Job != "":
		return call.Refuse(api.ErrConflict, fmt.Sprintf("Command %s no longer runs in the foreground: it became background job %s. Signal the job instead.", p.Exec, e.Job))
	case ok && e.Thread == k:
		return call.Refuse(api.ErrConflict, fmt.Sprintf("Command %s has ended: there is nothing to signal.", p.Exec))
	}
	return fmt.Errorf("%w: no command %s in thread %s", api.ErrNotFound, call.Quote(p.Exec), call.KeyName(k))
}

// signalJob sends sig to the tree of job p.Job, which this gateway must
// run: 404 for a job that never was, 409 for one that ended or runs on
// another host (or ran in a former run of this one). SIGKILL ends it at
// once (jb.kill, as the end of a stop's grace does), and it returns once
// the end is recorded.
func (js *Jobs) signalJob(ctx context.Context, p call.Params, sig syscall.Signal) (api.JobInfo, error) {
	jb, _, _, err := js.localJob(p)
	if err != nil {
		return api.JobInfo{}, err
	}
	if jb == nil {
		info, err := js.showJob(ctx, p.Tenant, p.Thread, p.Job)
		if err != nil {
			return api.JobInfo{}, err
		}
		return api.JobInfo{}, jobNotRunning(info)
	}
	if sig == unix.SIGKILL {
		jb.mu.Lock()
		running := jb.rec.Running
		jb.killed, jb.signalled = running, running
		jb.mu.Unlock()
		if !running {
			return api.JobInfo{}, jobNotRunning(jb.info())
		}
		jb.kill()
		select {
		case <-jb.done:
		case <-ctx.Done():
			return api.JobInfo{}, ctx.Err()
		}
		js.log.Info("job killed", "tenant", jb.key.Tenant, "thread", jb.key.Thread, "job", p.Job)
		return jb.info(), nil
	}
	// Marked before it is sent: the job's end may follow at once.
	jb.mu.Lock()
	jb.signalled = true
	jb.mu.Unlock()
	err = sendSignal(ctx, jb.signals, sig, jb.done, func() error { return jobNotRunning(jb.info()) })
	if err != nil {
		return api.JobInfo{}, err
	}
	return jb.info(), nil
}

// jobNotRunning is the refusal of a signal to a job that does not run
// here.
func jobNotRunning(info api.JobInfo) error {
	if info.Ended || info.ExitCode != nil {
		exit := "no exit code recorded"
		if info.ExitCode != nil {
			exit = "exit " + strconv.Itoa(*info.ExitCode)
		}
		return call.Refuse(api.ErrConflict, fmt.Sprintf("Background job %s has ended (%s): there is nothing to signal.", info.ID, exit))
	}
	return call.Refuse(api.ErrConflict, fmt.Sprintf("Background job %s does not run on this host (it ran on %s, or in a former run of its daemon), which cannot signal it.", info.ID, call.HostName(info.HostID)))
}

// sendSignal hands sig to a running command's Run through signals, unless
// done says the command ended first: then it returns ended().
func sendSignal(ctx context.Context, signals chan<- syscall.Signal, sig syscall.Signal, done <-chan struct{}, ended func() error) error {
	select {
	case <-done:
		return ended()
	default:
	}
	select {
	case signals <- sig:
		return nil
	case <-done:
		return ended()
	case <-ctx.Done():
		return ctx.Err()
	}
}
