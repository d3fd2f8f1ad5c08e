package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"warren/client"
)

// The local side of `warren exec -t`: this terminal in raw mode, its keys
// sent as the command's input, and its size followed.

// rawTerminal puts the terminal fd in raw mode, as cfmakeraw(3) does, and
// returns the function that restores it.
func rawTerminal(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// terminalSize is the size of the terminal fd, or 24 × 80.
func terminalSize(fd int) (uint16, uint16) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return 24, 80
	}
	return ws.Row, ws.Col
}

// relayTerminal sends this process's input to the running command id and
// follows the terminal's size, until ctx ends.
func relayTerminal(ctx context.Context, c *client.Client, tenant, thread, id string) {
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if c.ExecStdin(ctx, tenant, thread, id, string(buf[:n]), false) != nil {
					return
				}
			}
			if err != nil {
				c.ExecStdin(ctx, tenant, thread, id, "", true)
				return
			}
		}
	}()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				rows, cols := terminalSize(int(os.Stdout.Fd()))
				c.ExecResize(ctx, tenant, thread, id, rows, cols)
			}
		}
	}()
}
