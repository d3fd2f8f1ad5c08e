package main

import (
	"context"
	"io"
	"os"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"warren/api"
	"warren/client"
	"warren/internal/cli"
)

// phaseNames say what a long call is doing in each phase of its progress
// (api.Progress), for the bar.
var phaseNames = map[string]string{
	"read":   "reading the workspace",
	"write":  "writing the workspace",
	"remove": "removing the files",
	// An image's pull (warren image pull, bind --image).
	"resolve":  "resolving the image",
	"download": "downloading the layers (bytes)",
	"unpack":   "unpacking the layers",
}

// withProgressBar returns ctx that shows the progress of the long calls
// made under it (client.WithProgress) as a bar on e's stderr when it is a
// terminal, one bar per phase (mpb, a well-kept library); and the func
// that ends the bar, to call once the call returned. When stderr is not a
// terminal, ctx is as it was: nothing is asked and nothing printed.
func withProgressBar(ctx context.Context, e *cli.Env) (context.Context, func()) {
	w, ok := e.Stderr.(*os.File)
	if !ok || !isTerminal(int(w.Fd())) {
		return ctx, func() {}
	}
	b := &bar{w: w}
	return client.WithProgress(ctx, b.show), b.end
}

// bar is the progress shown for one call: a line per phase, drawn at each
// frame. Its methods run on the calling goroutine (client.WithProgress
// calls show there); mpb's goroutines draw, and end waits for them.
type bar struct {
	w       io.Writer
	p       *mpb.Progress // nil before the first frame
	draw    chan any      // asks p to draw now
	phase   string
	current *mpb.Bar // the bar of phase
	known   bool     // current's total is known
}

func (b *bar) show(f api.Progress) {
	if b.p == nil {
		b.draw = make(chan any)
		b.p = mpb.New(mpb.WithOutput(b.w), mpb.WithWidth(30), mpb.WithManualRefresh(b.draw))
	}
	if b.current == nil || f.Phase != b.phase {
		b.done()
		name := phaseNames[f.Phase]
		if name == "" {
			name = f.Phase
		}
		b.phase, b.known = f.Phase, f.Total > 0
		if b.known {
			b.current = b.p.AddBar(f.Total,
				mpb.PrependDecorators(decor.Name(name+" "), decor.CountersNoUnit("%d / %d ")),
				mpb.AppendDecorators(decor.Percentage()))
		} else {
			// Not known: a spinner with the count.
			b.current = b.p.AddSpinner(0, mpb.PrependDecorators(decor.Name(name+" "), decor.CurrentNoUnit("%d ")))
		}
	} else if b.known && f.Total > 0 {
		b.current.SetTotal(f.Total, false)
	}
	b.current.SetCurrent(f.Done)
	b.draw <- nil
}

// done ends the current phase's bar where it is.
func (b *bar) done() {
	if b.current != nil {
		b.current.SetTotal(-1, true) // complete at its current count
		b.current = nil
	}
}

// end ends the bars, if any are shown, and waits until they are drawn.
func (b *bar) end() {
	if b.p == nil {
		return
	}
	b.done()
	b.p.Wait()
	b.p = nil
}

// isTerminal says whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
