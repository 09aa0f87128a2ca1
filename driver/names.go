package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Token is the reversible escape of a name (a queue, a message type) into a
// broker's name charset, for brokers whose names take ASCII letters,
// digits, '-' and '_' (NATS subject tokens and consumers, Kafka topics):
//
//   - ASCII letters, digits and '-' stand for themselves;
//   - '_' is written "__";
//   - every other byte is written '_' followed by two upper-case hex digits.
//
// "github.com/acme/sales.OrderPlaced" becomes
// "github_2Ecom_2Facme_2Fsales_2EOrderPlaced". The escape never writes '_'
// followed by a letter other than A to F, so a name built as an escaped
// part, "_G" and another part stays unambiguous.
type Token struct{}

// TokenByte reports whether c stands for itself in a Token escape.
func TokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// Escape writes s with the Token escape.
func (Token) Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case TokenByte(c):
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		default:
			writeHex(&b, '_', c)
		}
	}
	return b.String()
}

// Unescape reverses Escape; it refuses text Escape cannot produce.
func (Token) Unescape(s string) (string, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case TokenByte(c):
			out = append(out, c)
		case c != '_':
			return "", fmt.Errorf("%w: byte %#x at %d", ErrBadEscape, c, i)
		case i+1 < len(s) && s[i+1] == '_':
			out = append(out, '_')
			i++
		case i+2 < len(s):
			hi, lo := unhex(s[i+1], false), unhex(s[i+2], false)
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("%w: %q at %d", ErrBadEscape, s[i:i+3], i)
			}
			out = append(out, byte(hi<<4|lo))
			i += 2
		default:
			return "", fmt.Errorf("%w: truncated at %d", ErrBadEscape, i)
		}
	}
	return string(out), nil
}

// Fit returns s when it is at most limit bytes long. A longer s keeps its
// start and ends with '-' and the first hashLen hex digits of the SHA-256
// of name (the name s was made from), so two names cut at the same place
// still differ; the result is then exactly limit bytes long, or the hash
// suffix alone when limit leaves no room for a start.
func Fit(s, name string, limit, hashLen int) string {
	if len(s) <= limit {
		return s
	}
	keep := max(limit-hashLen-1, 0)
	return s[:keep] + "-" + Hash(name, hashLen)
}

// Hash returns the first n (at most 64) hex digits of the SHA-256 of name:
// the stable suffix of Fit and Sanitize.
func Hash(name string, n int) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])[:min(max(n, 0), 2*len(sum))]
}

// Sanitize maps name to a name of at most limit bytes that allowed accepts
// byte by byte, for brokers whose names need not be reversible (SQS queues,
// SNS topics). A name that is already valid, non-empty and short enough
// stays as it is. Any other gets every refused byte replaced by '_' (which
// allowed must accept), is cut to leave room, and ends with '-' and hashLen
// hex digits of the SHA-256 of the original, so two names that differ only
// in a replaced byte or beyond the cut still map to different names.
func Sanitize(name string, allowed func(byte) bool, limit, hashLen int) string {
	if name != "" && len(name) <= limit && Valid(name, allowed) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !allowed(c) {
			b[i] = '_'
		}
	}
	if keep := max(limit-hashLen-1, 0); len(b) > keep {
		b = b[:keep]
	}
	return string(b) + "-" + Hash(name, hashLen)
}

// Valid reports whether allowed accepts every byte of s.
func Valid(s string, allowed func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !allowed(s[i]) {
			return false
		}
	}
	return true
}
