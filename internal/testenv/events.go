package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"warren/api"
)

// EventLines decodes the NDJSON lines of an event stream into a channel,
// strictly: every line one event, no field the Event type does not have.
// The channel closes when the stream ends.
func EventLines(t testing.TB, r io.Reader) <-chan api.Event {
	t.Helper()
	ch := make(chan api.Event, 1<<16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.DisallowUnknownFields()
			var ev api.Event
			if err := dec.Decode(&ev); err != nil {
				t.Errorf("line %q is not an event: %v", sc.Bytes(), err)
				return
			}
			ch <- ev
		}
	}()
	return ch
}
