package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxReasonLen bounds a normalised reason: an error text can be a whole
// response body, a group key need not be.
const maxReasonLen = 1024

// The patterns NormalizeReason replaces, in order: quoted values first (so a
// number inside quotes does not leave the quotes behind), then UUIDs, then
// long hexadecimal runs (hashes, addresses, trace IDs), then numbers.
var (
	reasonQuoted = regexp.MustCompile(`"[^"]*"|` + "`[^`]*`")
	// A single quote opens a value only after a non-letter: "can't" is a
	// word, not a quote.
	reasonSingle = regexp.MustCompile(`(^|[^\p{L}\p{N}])'[^']*'`)
	reasonUUID   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	reasonHex    = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]*[0-9][0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*[0-9][0-9a-f]*\b`)
	reasonNumber = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	reasonSpace  = regexp.MustCompile(`\s+`)
)

// NormalizeReason turns an error text into the shape it shares with every
// failure of the same cause: quoted values become "?", UUIDs <uuid>,
// hexadecimal values <hex> and numbers <n>, and runs of white space one
// space. So "order 42 not found" and "order 97 not found" normalise alike,
// and their failures group (FailureGroup). The result is at most 1,024
// bytes.
func NormalizeReason(reason string) string {
	s := reasonQuoted.ReplaceAllStringFunc(reason, func(q string) string { return q[:1] + "?" + q[:1] })
	s = reasonSingle.ReplaceAllString(s, "$1'?'")
	s = reasonUUID.ReplaceAllString(s, "<uuid>")
	s = reasonHex.ReplaceAllStringFunc(s, func(h string) string {
		if len(h) < 6 && !strings.HasPrefix(strings.ToLower(h), "0x") {
			return h // a short word such as "f1" or "a2b" is not an identifier
		}
		return "<hex>"
	})
	s = reasonNumber.ReplaceAllString(s, "<n>")
	s = strings.TrimSpace(reasonSpace.ReplaceAllString(s, " "))
	if len(s) > maxReasonLen {
		s = strings.ToValidUTF8(s[:maxReasonLen], "")
	}
	return s
}

// FailureGroup returns the group of a failure: a short stable hash of the
// message type, the endpoint and the normalised reason (NormalizeReason).
// Failures of one type at one endpoint for one cause share a group, so ten
// thousand identical failures are one line for an operator.
func FailureGroup(typ, endpoint, reason string) string {
	h := sha256.New()
	for _, s := range [...]string{typ, endpoint, NormalizeReason(reason)} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// FailedFromEnvelope makes the FailedMessage a FailedStore keeps for an
// envelope of the error queue, from its failure headers
// (HeaderFailureReason, HeaderFailureKind, HeaderFailureEndpoint,
// HeaderFailureQueue, HeaderFailureTime, HeaderFailureAttempts). The failure
// time is now when the header is missing or malformed. A message whose ID
// is empty (a wire message that could not be decoded) gets an ID derived
// from its body, so redeliveries of it are one stored message; one whose ID
// is not valid UTF-8 text without NUL bytes (a foreign producer's, which no
// text column holds) gets an ID derived from those bytes, "invalid-id-"
// and a hash, so that two such IDs never share a stored message.
func FailedFromEnvelope(env *Envelope, now time.Time) FailedMessage {
	at, err := time.Parse(time.RFC3339Nano, env.Header(HeaderFailureTime))
	if err != nil {
		at = now
	}
	at = at.UTC()
	attempts, _ := strconv.Atoi(env.Header(HeaderFailureAttempts))
	id := env.ID
	switch {
	case id == "":
		sum := sha256.Sum256(env.Body)
		id = "undecodable-" + hex.EncodeToString(sum[:12])
	case !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0:
		sum := sha256.Sum256([]byte(id))
		id = "invalid-id-" + hex.EncodeToString(sum[:12])
	}
	reason := env.Header(HeaderFailureReason)
	if reason == "" {
		reason = env.Header(HeaderDecodeError)
	}
	endpoint := env.Header(HeaderFailureEndpoint)
	return FailedMessage{
		ID: id, Type: env.Type, Endpoint: endpoint, Queue: env.Header(HeaderFailureQueue),
		Kind: env.Header(HeaderFailureKind), Reason: reason, Group: FailureGroup(env.Type, endpoint, reason),
		Attempts: attempts, Failures: 1, FirstFailed: at, LastFailed: at, Envelope: MarshalEnvelope(env),
	}
}
