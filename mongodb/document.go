package mongodb

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Document field names.
const (
	fieldKind        = "kind"
	fieldEnvelope    = "envelope"
	fieldDueAt       = "due_at"
	fieldAvailableAt = "available_at"
	fieldTransport   = "transport"
	fieldToken       = "token"
	fieldLeaseUntil  = "lease_until"
	fieldFailures    = "failures"
	fieldLastError   = "last_error"
	fieldCreatedAt   = "created_at"
	fieldType        = "message_type"
	fieldRetryAt     = "retry_at"
)

// message is one scheduled message as stored. DueAt is exact Unix
// nanoseconds, because BSON dates hold milliseconds only; available_at and
// lease_until are dates, compared with the server's clock.
//
// Token is the lease token of the latest claim, kept after a release or a
// failure; LeaseUntil is set while a claim holds the document and null
// otherwise. So a settle matches (_id, token, lease_until set), and every
// claim changes the token, which is what a claim's conditional update
// compares.
type message struct {
	ID          string     `bson:"_id"`
	Kind        int32      `bson:"kind"`
	Envelope    []byte     `bson:"envelope"`
	DueAt       int64      `bson:"due_at"`
	AvailableAt time.Time  `bson:"available_at"`
	Transport   string     `bson:"transport"`
	Token       string     `bson:"token,omitempty"`
	LeaseUntil  *time.Time `bson:"lease_until"`
	Failures    int32      `bson:"failures"`
	LastError   string     `bson:"last_error"`
	CreatedAt   time.Time  `bson:"created_at"`
	Type        string     `bson:"message_type"` // missing in documents of earlier versions: ""
	// RetryAt is the end of the backoff of the last failure, null or
	// missing when none is pending: a release puts the document back at
	// the later of it and the due time (see ReleaseOutgoing).
	RetryAt *time.Time `bson:"retry_at,omitempty"`
}

func (m *message) outgoing() bus.OutgoingMessage {
	o := bus.OutgoingMessage{
		ID: m.ID, Kind: bus.Kind(m.Kind), Type: m.Type, Envelope: m.Envelope, Transport: m.Transport, Token: m.Token,
		DueAt: time.Unix(0, m.DueAt), Failures: int(m.Failures), LastError: m.LastError,
	}
	if m.LeaseUntil != nil {
		o.LeaseUntil = *m.LeaseUntil
	}
	return o
}

// ceilMillis rounds t up to a whole millisecond, the precision of a BSON
// date, so a row never becomes claimable before its time.
func ceilMillis(t time.Time) time.Time {
	r := t.Truncate(time.Millisecond)
	if r.Before(t) {
		r = r.Add(time.Millisecond)
	}
	return r
}

// newToken returns a random 128-bit lease token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ofTransport matches the documents a dispatcher of transport may send:
// its own and those stored without a transport (empty or, in documents
// stored before the field existed, missing; null matches both).
func ofTransport(transport string) bson.E {
	in := bson.A{"", nil}
	if transport != "" {
		in = bson.A{transport, "", nil}
	}
	return bson.E{Key: fieldTransport, Value: bson.D{{Key: "$in", Value: in}}}
}

// byAvailability is the claim order: earliest claimable first, then by ID
// (UUIDv7 IDs are time-ordered).
func byAvailability() bson.D {
	return bson.D{{Key: fieldAvailableAt, Value: 1}, {Key: fieldDueAt, Value: 1}, {Key: "_id", Value: 1}}
}

// idIn matches the given IDs: a lone ID by equality, which FerretDB can
// hand to its backend, more with $in.
func idIn(ids []string) bson.E {
	if len(ids) == 1 {
		return bson.E{Key: "_id", Value: ids[0]}
	}
	return bson.E{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}
}

// tokenIs matches a token as read from a document: "" stands for none.
func tokenIs(token string) bson.E {
	if token == "" {
		return bson.E{Key: fieldToken, Value: nil}
	}
	return bson.E{Key: fieldToken, Value: token}
}

// leased matches documents a claim holds (its lease may have lapsed).
func leased() bson.E {
	return bson.E{Key: fieldLeaseUntil, Value: bson.D{{Key: "$ne", Value: nil}}}
}
