package cli

import "strings"

// Strings is a flag given any number of times, each value appended.
type Strings []string

func (s *Strings) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(*s, ",")
}

// Set appends v.
func (s *Strings) Set(v string) error { *s = append(*s, v); return nil }
