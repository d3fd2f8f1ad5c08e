package events

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// addEvents adds events seq from..to to l, each with a message of size
// bytes.
func addEvents(t *testing.T, l *eventLog, from, to uint64, size int) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		ev := api.Event{Seq: seq, Time: time.Now().UTC(), Type: testEvent, Thread: "t", Message: strings.Repeat("m", size)}
		line, err := encodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.add(ev.Seq, line); err != nil {
			t.Fatalf("add event %d: %v", seq, err)
		}
	}
}

// fileSeqs reads the log file at path as a reader after a crash would,
// without the log's help: the seqs of its complete lines.
func fileSeqs(t *testing.T, path string) []uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		line = bytes.TrimLeft(line, "\x00")
		if len(line) == 0 {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("line %.80q of the log: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for seq := from; seq <= to; seq++ {
		s = append(s, seq)
	}
	return s
}

func ringSeqs(l *eventLog) []uint64 {
	var s []uint64
	for _, line := range l.since(0) {
		var ev api.Event
		if json.Unmarshal(line, &ev) != nil {
			return append(s, 0) // never a seq: the comparison fails
		}
		s = append(s, ev.Seq)
	}
	return s
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEventLogInPageCache: an added event is in the file for any reader
// at once, before the log is closed (the daemon killed then keeps it),
// and adding does not change the file's size until it is full; a log
// opened again keeps the newest max.
func TestEventLogInPageCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.log")
	l, err := openEventLog(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	st0, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	addEvents(t, l, 1, 4, 10)
	if got := fileSeqs(t, path); !equalSeqs(got, seqRange(1, 4)) {
		t.Fatalf("the file holds %v while the log is open, want 1 to 4", got)
	}
	st1, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Size() != st0.Size() || !os.SameFile(st0, st1) {
		t.Errorf("the file went from %d bytes to %d (same file: %v) for 4 small events; it is made at its full size", st0.Size(), st1.Size(), os.SameFile(st0, st1))
	}
	addEvents(t, l, 5, 12, 10)
	// Not closed: as after a kill -9.
	again, err := openEventLog(path, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	l.close()
	if got := ringSeqs(again); !equalSeqs(got, seqRange(8, 12)) {
		t.Errorf("log opened again keeps %v, want 8 to 12", got)
	}
}

// TestEventLogRemadeWhenFull: events that do not fit make the file anew
// with the newest ones; an event larger than the whole file is kept too.
func TestEventLogRemadeWhenFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.log")
	l, err := openEventLog(path, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	addEvents(t, l, 1, 40, 700) // 3 × 512 bytes of room: remade many times
	if got := fileSeqs(t, path); len(got) < 3 || !equalSeqs(got[len(got)-3:], seqRange(38, 40)) {
		t.Errorf("the file holds %v, want it to end with 38 to 40", got)
	}
	addEvents(t, l, 41, 41, 1<<20)
	if got := fileSeqs(t, path); got[len(got)-1] != 41 {
		t.Errorf("the file holds %v after a 1 MiB event, want it to end with 41", got)
	}
	addEvents(t, l, 42, 43, 10)
	if got := fileSeqs(t, path); !equalSeqs(got[len(got)-3:], seqRange(41, 43)) {
		t.Errorf("the file holds %v, want it to end with 41 to 43", got)
	}
}

// TestEventLogTornAndOld: a line cut short by a crash is dropped, lines
// after zero bytes are read, and a log of plain lines (as older daemons
// wrote it) is read as well.
func TestEventLogTornAndOld(t *testing.T) {
	var data []byte
	for seq := uint64(1); seq <= 3; seq++ {
		line, err := encodeEvent(api.Event{Seq: seq, Type: testEvent})
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, line...)
	}
	line4, _ := encodeEvent(api.Event{Seq: 4, Type: testEvent})
	for _, tc := range []struct {
		name string
		file []byte
		want []uint64
	}{
		{"plain lines", data, seqRange(1, 3)},
		{"zero bytes after", append(bytes.Clone(data), make([]byte, 4096)...), seqRange(1, 3)},
		{"torn last line", append(append(bytes.Clone(data), line4[:len(line4)/2]...), make([]byte, 100)...), seqRange(1, 3)},
		{"zeros in between", append(append(append(bytes.Clone(data[:len(data)/3+1]), make([]byte, 50)...), '\n'), line4...), []uint64{1, 4}},
		{"garbage", []byte("{not json\n\x00\x00{\"seq\":\n"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.log")
			if err := os.WriteFile(path, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := openEventLog(path, 10)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			if got := ringSeqs(l); !equalSeqs(got, tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEventLogFileCutUnderIt: someone cuts the mapped file short; the
// next copy faults, and the log goes on with writes instead of ending
// the daemon.
func TestEventLogFileCutUnderIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.log")
	l, err := openEventLog(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	addEvents(t, l, 1, 2, 10)
	if l.mem == nil {
		t.Fatal("the log did not map its file")
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	addEvents(t, l, 3, 4, 10)
	if l.mem != nil {
		t.Error("the log still uses its mapping after a fault")
	}
	if got := fileSeqs(t, path); !equalSeqs(got, seqRange(3, 4)) {
		t.Errorf("the file holds %v after it was cut, want 3 and 4 (written after the fault)", got)
	}
}
