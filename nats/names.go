package nats

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Names on the server. A queue name or a message type name may hold any
// character, but a NATS subject token may not contain '.', '*', '>' or
// whitespace, and a consumer name may not contain '/' or '\' either. Both are
// therefore written with a reversible escape that keeps the common
// characters readable:
//
//   - ASCII letters, digits and '-' stand for themselves;
//   - '_' is written "__";
//   - every other byte is written '_' followed by two upper-case hex digits.
//
// "github.com/acme/sales.OrderPlaced" becomes
// "github_2Ecom_2Facme_2Fsales_2EOrderPlaced".

// Consumer name bounds: the server keeps one directory per consumer, and
// file systems limit a name to 255 bytes. An event consumer name is a queue
// part, "_G" and a type part.
const (
	maxConsumerName = 128
	maxTypeName     = 96
)

// escapeToken encodes s as a valid subject token (and consumer name).
func escapeToken(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c):
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		default:
			b.WriteByte('_')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// errBadEscape is returned by unescapeToken for text escapeToken cannot produce.
var errBadEscape = errors.New("malformed escape")

// unescapeToken reverses escapeToken.
func unescapeToken(s string) (string, error) {
	if !strings.Contains(s, "_") {
		for i := 0; i < len(s); i++ {
			if !isPlain(s[i]) {
				return "", fmt.Errorf("%w: byte %#x at %d", errBadEscape, s[i], i)
			}
		}
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c):
			out = append(out, c)
		case c != '_':
			return "", fmt.Errorf("%w: byte %#x at %d", errBadEscape, c, i)
		case i+1 < len(s) && s[i+1] == '_':
			out = append(out, '_')
			i++
		case i+2 < len(s):
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("%w: %q at %d", errBadEscape, s[i:i+3], i)
			}
			out = append(out, byte(hi<<4|lo))
			i += 2
		default:
			return "", fmt.Errorf("%w: truncated at %d", errBadEscape, i)
		}
	}
	return string(out), nil
}

// unhex decodes one upper-case hex digit, or returns -1.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// consumerName is the durable consumer name of a queue: its escaped name,
// shortened with a hash suffix when it is too long.
func consumerName(queue string) string {
	return shorten(escapeToken(queue), queue, maxConsumerName)
}

// shorten returns escaped if it fits in limit bytes, else its start and a
// hash of the original name.
func shorten(escaped, name string, limit int) string {
	if len(escaped) <= limit {
		return escaped
	}
	sum := sha256.Sum256([]byte(name))
	return escaped[:limit-17] + "-" + hex.EncodeToString(sum[:8])
}

// eventConsumerName is the durable consumer name through which queue
// receives events of type typ: the queue's consumer name, "_G", and the
// escaped type (shortened with a hash suffix when too long). The escape
// never produces "_G", so the queue part is unambiguous.
func eventConsumerName(queue, typ string) string {
	return eventConsumerPrefix(queue) + shorten(escapeToken(typ), typ, maxTypeName)
}

// eventConsumerPrefix starts the names of every event consumer of queue.
func eventConsumerPrefix(queue string) string { return consumerName(queue) + "_G" }

// queueSubject is the subject commands to queue are published on.
func (t *Transport) queueSubject(queue string) string {
	return t.opts.SubjectPrefix + ".q." + escapeToken(queue)
}

// eventSubject is the subject events of type typ are published on.
func (t *Transport) eventSubject(typ string) string {
	return t.opts.SubjectPrefix + ".e." + escapeToken(typ)
}

// validStreamName reports whether s is a valid stream name.
func validStreamName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*>/\\ \t\r\n") && printable(s)
}

// validSubjectPrefix reports whether s is one or more dot-separated literal
// subject tokens.
func validSubjectPrefix(s string) bool {
	if s == "" || strings.HasPrefix(s, "$") || strings.ContainsAny(s, "*> \t\r\n") || !printable(s) {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] == 0x7f {
			return false
		}
	}
	return true
}
