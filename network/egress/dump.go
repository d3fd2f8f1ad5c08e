package egress

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// dumpTries bounds the retries of an interrupted dump.
const dumpTries = 10

// Dump runs a netlink dump (a list of links, addresses, routes, sockets)
// again while the kernel says a change interrupted it: links come and go
// at any time (a jail's namespace ending takes its link), and a dump made
// meanwhile may be incomplete. Its answer is whole, or an error.
func Dump[T any](list func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == dumpTries {
			return v, err
		}
	}
}
