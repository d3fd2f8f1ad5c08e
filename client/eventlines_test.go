package client

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadEventLine: lines come whole with their newline, however long
// (up to MaxEventLine); a line cut short is io.ErrUnexpectedEOF, a clean
// end io.EOF, and a longer line an error, not a growing buffer.
func TestReadEventLine(t *testing.T) {
	long := `{"data":"` + strings.Repeat("x", 300<<10) + `"}` + "\n"
	br := bufio.NewReaderSize(strings.NewReader("{}\n"+long+"{\"seq\":2}\n"), 64<<10)
	for i, want := range []string{"{}\n", long, "{\"seq\":2}\n"} {
		got, err := readEventLine(br)
		if err != nil || string(got) != want {
			t.Fatalf("line %d: got %d bytes (%v), want %d", i, len(got), err, len(want))
		}
	}
	if _, err := readEventLine(br); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: got %v, want io.EOF", err)
	}

	for _, tc := range []struct{ name, in string }{
		{"short line cut", `{"seq":1`},
		{"long line cut", `{"data":"` + strings.Repeat("x", 200<<10)},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 64<<10)
		if _, err := readEventLine(br); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: got %v, want io.ErrUnexpectedEOF", tc.name, err)
		}
	}

	br = bufio.NewReaderSize(io.MultiReader(strings.NewReader(`{"data":"`), endless{}), 64<<10)
	if _, err := readEventLine(br); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("an endless line: got %v, want an error about its length", err)
	}
}

// endless reads as an endless run of x.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}
