package threads

import (
	"strings"
	"testing"

	"warren/api"
	"warren/meta"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, k := range []meta.ThreadKey{
		{Tenant: "a", Thread: "b"},
		{Tenant: "a/b", Thread: "c"},
		{Tenant: "a", Thread: "b/c"},
		{Tenant: "..", Thread: "."},
		{Tenant: "a\x00b", Thread: "\x00"},
		{Tenant: "é", Thread: strings.Repeat("t", api.MaxIDBytes)},
		{Tenant: strings.Repeat("t", api.MaxIDBytes), Thread: strings.Repeat("é", api.MaxIDBytes/2)},
	} {
		c := EncodeCursor(k)
		if len(c) > MaxCursorBytes {
			t.Errorf("cursor of %q: %d bytes, over the bound %d", k, len(c), MaxCursorBytes)
		}
		got, err := DecodeCursor(c)
		if err != nil || got != k {
			t.Errorf("DecodeCursor(EncodeCursor(%q)): got %q, %v", k, got, err)
		}
	}
}
