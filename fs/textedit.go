package fs

import (
	"bytes"
	"fmt"
	"strings"
)

// Text as the file API edits it: an agent writes "\n" and never a byte
// order mark, while the files it edits may use "\r\n" and start with a
// BOM. The file keeps its own style: an edit matches the agent's text in
// the file's line endings and writes the new text in them, and a write
// over an existing file takes on its line endings and BOM. Everything the
// edit does not touch stays byte for byte as it was.

var utf8BOM = []byte("\xef\xbb\xbf")

// textStyle is how a file writes its text.
type textStyle struct {
	bom  bool
	crlf bool // lines end in "\r\n"
}

// styleOf reads the style of content: CRLF if most of its line ends are.
func styleOf(content []byte) textStyle {
	s := textStyle{bom: bytes.HasPrefix(content, utf8BOM)}
	crlf := bytes.Count(content, []byte("\r\n"))
	lf := bytes.Count(content, []byte("\n")) - crlf
	s.crlf = crlf > 0 && crlf >= lf
	return s
}

// apply writes text, which uses "\n" (or already the style's endings), in
// the style s.
func (s textStyle) apply(text string) string {
	text = strings.TrimPrefix(text, string(utf8BOM))
	if s.crlf {
		text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\n", "\r\n")
	}
	if s.bom {
		text = string(utf8BOM) + text
	}
	return text
}

// restyle gives new content for a file that held old: in old's style,
// unless the new content chose its own (it has "\r" or a BOM already).
func restyle(old, content []byte) []byte {
	if len(old) == 0 {
		return content
	}
	s := styleOf(old)
	if bytes.IndexByte(content, '\r') >= 0 {
		s.crlf = false
	}
	if bytes.HasPrefix(content, utf8BOM) {
		s.bom = false
	}
	if !s.crlf && !s.bom {
		return content
	}
	return []byte(s.apply(string(content)))
}

// NoMatchError: the text to replace is not in the file.
type NoMatchError struct{ Path string }

func (e *NoMatchError) Error() string {
	return fmt.Sprintf("The text to replace was not found in %s. Read the file again and copy the text exactly.", e.Path)
}

// ManyMatchesError: the text to replace is in the file more than once, and
// the edit asked for one.
type ManyMatchesError struct {
	Path  string
	Count int
}

func (e *ManyMatchesError) Error() string {
	return fmt.Sprintf("The text to replace was found %d times in %s. Give more context to make it unique, or ask to replace all.", e.Count, e.Path)
}

// replaceText replaces old with new in content: the one occurrence, or
// all of them. The agent's text is tried in the file's line endings first,
// then as given (a file with mixed endings).
func replaceText(path string, content []byte, old, new string, all bool) ([]byte, int, error) {
	s := styleOf(content)
	s.bom = false // the BOM is at the start of the file, not in the text
	body := content
	var bom []byte
	if bytes.HasPrefix(body, utf8BOM) {
		bom, body = utf8BOM, body[len(utf8BOM):]
	}
	tries := [][2]string{{s.apply(old), s.apply(new)}}
	if plain := strings.TrimPrefix(old, string(utf8BOM)); plain != tries[0][0] {
		tries = append(tries, [2]string{plain, strings.TrimPrefix(new, string(utf8BOM))})
	}
	for _, t := range tries {
		n := bytes.Count(body, []byte(t[0]))
		switch {
		case n == 0:
			continue
		case n > 1 && !all:
			return nil, 0, &ManyMatchesError{Path: path, Count: n}
		}
		limit := 1
		if all {
			limit = -1
		}
		out := append(append([]byte(nil), bom...), bytes.Replace(body, []byte(t[0]), []byte(t[1]), limit)...)
		if !all {
			n = 1
		}
		return out, n, nil
	}
	return nil, 0, &NoMatchError{Path: path}
}
