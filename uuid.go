package bus

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// idGenerator makes UUIDv7 identifiers (RFC 9562): 48 bits of Unix
// milliseconds, then a 12-bit counter that keeps IDs made in the same
// millisecond ordered, then random bits. One generator per bus; no globals.
type idGenerator struct {
	mu      sync.Mutex
	lastMS  int64
	counter uint16
	buf     [256]byte // random bytes, refilled in bulk: crypto/rand per ID is slow
	used    int
}

func newIDGenerator() *idGenerator { return &idGenerator{used: 256} }

// New returns a new UUIDv7 in its canonical 36-character form.
func (g *idGenerator) New() string {
	var u [16]byte
	g.mu.Lock()
	ms := time.Now().UnixMilli()
	if ms <= g.lastMS {
		g.counter++
		if g.counter > 0x0fff { // counter exhausted: borrow the next millisecond
			g.lastMS++
			g.counter = 0
		}
		ms = g.lastMS
	} else {
		g.lastMS = ms
		g.counter = 0
	}
	if g.used+8 > len(g.buf) {
		_, _ = rand.Read(g.buf[:]) // crypto/rand.Read never fails (Go 1.24+)
		g.used = 0
	}
	copy(u[8:], g.buf[g.used:g.used+8])
	g.used += 8
	counter := g.counter
	g.mu.Unlock()

	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(counter>>8)
	u[7] = byte(counter)
	u[8] = 0x80 | u[8]&0x3f
	return formatUUID(u)
}

func formatUUID(u [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// derivedID returns the ID of the n-th message that endpoint sends while
// handling the message parentID: the same inputs give the same ID, so a
// retried handler that sends the same messages sends them under the same
// IDs, and the store and receivers can drop the copies. It is a UUIDv7
// whose timestamp is the parent's (when the parent is a UUIDv7) and whose
// other bits come from a SHA-256 of the inputs.
func derivedID(parentID, endpoint string, n int) string {
	h := sha256.New()
	h.Write([]byte(parentID))
	h.Write([]byte{0})
	h.Write([]byte(endpoint))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(n)))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	if p, ok := parseUUID(parentID); ok {
		copy(u[:6], p[:6])
	}
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return formatUUID(u)
}

// parseUUID decodes the canonical 36-character form.
func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	hexDigits := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(hexDigits)); err != nil {
		return u, false
	}
	return u, true
}
