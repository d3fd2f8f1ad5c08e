package call

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"warren/api"
	"warren/meta"
)

// ThreadKey checks a client's ids and applies the tenant default: an
// empty thread id, an id over api.MaxIDBytes or one that is not UTF-8 is
// refused (400).
func ThreadKey(tenant, thread string) (meta.ThreadKey, error) {
	if tenant == "" {
		tenant = api.DefaultTenant
	}
	if thread == "" {
		return meta.ThreadKey{}, fmt.Errorf("%w: empty thread id", api.ErrInvalid)
	}
	for _, id := range []struct{ name, v string }{{"tenant", tenant}, {"thread", thread}} {
		if len(id.v) > api.MaxIDBytes {
			return meta.ThreadKey{}, fmt.Errorf("%w: %s id is %d bytes, more than %d", api.ErrInvalid, id.name, len(id.v), api.MaxIDBytes)
		}
		// JSON replaces invalid UTF-8 with U+FFFD: a client could not read
		// its own id back, and two ids could look alike in every answer.
		if !utf8.ValidString(id.v) {
			return meta.ThreadKey{}, fmt.Errorf("%w: %s id is not valid UTF-8", api.ErrInvalid, id.name)
		}
	}
	return meta.ThreadKey{Tenant: tenant, Thread: thread}, nil
}

// KeyName names a thread in messages and errors: both ids quoted, so that
// "a/b" of tenant "t" never reads like thread "b" of tenant "t/a".
func KeyName(k meta.ThreadKey) string {
	return strconv.Quote(k.Tenant) + "/" + strconv.Quote(k.Thread)
}

// HostName names a host in messages; a binding without a host id was made
// by a server that does not pin its threads.
func HostName(id string) string {
	if id == "" {
		return "(unpinned)"
	}
	return id
}
