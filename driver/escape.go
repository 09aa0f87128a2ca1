package driver

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrBadEscape is wrapped by the error of an Unescape given text its
// Escape cannot produce.
var ErrBadEscape = errors.New("malformed escape")

// An Escaper writes a string in the characters a broker accepts and reads
// it back: Unescape(Escape(s)) == s for every s.
type Escaper interface {
	Escape(s string) string
	Unescape(s string) (string, error)
}

// Percent escapes a header value for a broker that refuses some bytes: each
// of them is written as '%' and two upper-case hex digits, and '%' itself
// always is. The other bytes stay as they are, so the common values are
// readable by other tools. The zero Percent escapes '%', the ASCII control
// characters and DEL.
type Percent struct {
	// KeepControl lists the control characters the broker takes as they
	// are (SQS: "\t\n\r").
	KeepControl string
	// UTF8 escapes the bytes of invalid UTF-8 and the characters U+FFFE and
	// U+FFFF, for brokers whose values are XML text (SQS).
	UTF8 bool
	// EdgeBlanks escapes a space or tab at the start or the end, for
	// brokers that trim values (NATS headers).
	EdgeBlanks bool
	// LowerHex also accepts lower-case hex digits when unescaping.
	LowerHex bool
}

const hexDigits = "0123456789ABCDEF"

// Escape writes s in the bytes the broker takes.
func (p Percent) Escape(s string) string {
	if !p.needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf || !p.UTF8 {
			if p.refused(c) || p.EdgeBlanks && isBlank(c) && (i == 0 || i == len(s)-1) {
				writeHex(&b, '%', c)
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if badRune(r, n) {
			for j := range n {
				writeHex(&b, '%', s[i+j])
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func (p Percent) refused(c byte) bool {
	return c == '%' || c == 0x7f || c < 0x20 && strings.IndexByte(p.KeepControl, c) < 0
}

func (p Percent) needsEscape(s string) bool {
	if s == "" {
		return false
	}
	if p.EdgeBlanks && (isBlank(s[0]) || isBlank(s[len(s)-1])) {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf || !p.UTF8 {
			if p.refused(c) {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if badRune(r, n) {
			return true
		}
		i += n
	}
	return false
}

func badRune(r rune, n int) bool { return r == utf8.RuneError && n == 1 || r == 0xFFFE || r == 0xFFFF }

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func writeHex(b *strings.Builder, mark, c byte) {
	b.WriteByte(mark)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0xf])
}

// Unescape reverses Escape. It reads any %XX, so values another tool wrote
// with more escapes than needed read as well.
func (p Percent) Unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: truncated %%-escape at %d", ErrBadEscape, i)
		}
		hi, lo := unhex(s[i+1], p.LowerHex), unhex(s[i+2], p.LowerHex)
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q at %d", ErrBadEscape, s[i:i+3], i)
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	return string(out), nil
}

// unhex decodes one hex digit, or returns -1.
func unhex(c byte, lower bool) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case lower && c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// Verbatim is the Escaper of brokers whose headers are byte strings (Kafka):
// it changes nothing.
type Verbatim struct{}

// Escape returns s.
func (Verbatim) Escape(s string) string { return s }

// Unescape returns s.
func (Verbatim) Unescape(s string) (string, error) { return s, nil }
