// Package mountinfo holds what the readers of /proc/self/mountinfo share:
// the kernel's escapes of the paths in it. It imports only the standard
// library, so any program of the project may use it.
package mountinfo

import "strings"

// Unescape undoes the octal escapes the kernel writes in mountinfo's
// paths and sources (\040 for a space, \011 a tab, \012 a newline, \134 a
// backslash). What is not three octal digits that fit in a byte stays as
// it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octalByte(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// octalByte parses three octal digits that fit in a byte.
func octalByte(d string) (byte, bool) {
	v := 0
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '7' {
			return 0, false
		}
		v = v*8 + int(d[i]-'0')
	}
	if v > 0xff {
		return 0, false
	}
	return byte(v), true
}
