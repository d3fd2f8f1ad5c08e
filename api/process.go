package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// SignalRequest sends a signal to a running command
// (POST .../exec/{id}/signal) or job (POST .../jobs/{job}/signal): to
// every process of its tree in the thread's jail, never to anything
// outside it.
type SignalRequest struct {
	// Signal is a name as kill -l lists it, with or without "SIG", in any
	// case ("SIGINT", "int", "RTMIN+2"), or a number from 1 to 64. 0 is
	// refused: it sends nothing.
	Signal Signal `json:"signal"`
}

// Signal is a signal as a request names it: a JSON string ("SIGTERM",
// "term", "15") or a JSON number (15). Its text is kept as given; the
// daemon parses it.
type Signal string

// UnmarshalJSON takes a string, or an integer as its decimal text.
func (s *Signal) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = Signal(v)
		return nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return fmt.Errorf("signal: want a name or a number, got %s", b)
	}
	*s = Signal(n.String())
	return nil
}

// SignalExecResponse answers POST .../exec/{id}/signal: the command, and
// the signal sent, by its name ("SIGINT").
type SignalExecResponse struct {
	ID     string `json:"id"`
	Signal string `json:"signal"`
}

// SignalJobResponse answers POST .../jobs/{job}/signal: the job as it is
// once the signal was sent (for SIGKILL, once its end is recorded), and the
// signal sent, by its name.
type SignalJobResponse struct {
	Job    JobInfo `json:"job"`
	Signal string  `json:"signal"`
}
