package nats

import (
	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// values is the escape of header values: NATS headers are text lines whose
// values the server trims.
var values = driver.Percent{EdgeBlanks: true}

// Wire format. The body is env.Body; every other field is a NATS header, so
// other tools (the nats CLI, monitoring) can read the messages:
//
//	Nats-Msg-Id              <ID>@<subject>[#<digest>] (see msgID)
//	Postbus-Id               ID
//	Postbus-Type             Type
//	Postbus-Kind             "command", "event", "reply" (or the number)
//	Postbus-Content-Type     ContentType
//	Postbus-Correlation-Id   CorrelationID
//	Postbus-Source           Source
//	Postbus-Destination      Destination
//	Postbus-Sent-At          SentAt, RFC 3339 with nanoseconds, UTC
//	Postbus-Due-At           DueAt, same format
//	Postbus-Expires-At       ExpiresAt, same format
//	Postbus-Ordering-Key     OrderingKey
//	Postbus-H-<key>          Headers[key]
//	Postbus-A-<key>          Attributes[key]
//	Postbus-S-<key>          StickyAttributes[key]
//
// Empty strings and zero times are left out. Map keys use the token escape of
// names.go. Values are sent as they are unless they hold a control byte, a
// '%', or leading or trailing white space; those bytes are then written as
// %XX (upper-case hex only), so every value round-trips exactly.
//
// mapping carries every envelope field but the body in those headers.
var mapping = driver.Mapping{
	Keys:    driver.DefaultKeys(),
	Values:  values,
	MapKeys: driver.Token{},
}

// encodeMsg builds the NATS message for env on subject; origin names the
// delivery being handled when the send was made (see msgID).
func encodeMsg(subject string, env *bus.Envelope, origin string) *natsio.Msg {
	h := make(natsio.Header, 12+len(env.Headers)+len(env.Attributes)+len(env.StickyAttributes))
	// The mapping sets no size limits, so Encode cannot fail.
	_ = mapping.Encode(env, func(k, v string) { h[k] = []string{v} })
	if env.ID != "" {
		h[jetstream.MsgIDHeader] = []string{msgID(subject, env, origin)}
	}
	return &natsio.Msg{Subject: subject, Header: h, Data: env.Body}
}

// decodeMsg rebuilds the envelope of a received message. A message it
// cannot read still yields an envelope: the raw body, the ID if readable,
// every header as text (driver.Mapping.Foreign), and bus.HeaderDecodeError
// saying what was wrong.
func decodeMsg(h natsio.Header, body []byte) *bus.Envelope {
	seq := func(yield func(k, v string) bool) {
		for k, vals := range h {
			if len(vals) > 0 && !yield(k, vals[0]) {
				return
			}
		}
	}
	env, err := mapping.Decode(seq)
	if err != nil {
		return driver.Undecodable("nats", env.ID, body, mapping.Foreign(seq), err)
	}
	env.Body = body
	return env
}
