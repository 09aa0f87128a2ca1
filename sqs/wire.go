package sqs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"unicode/utf8"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Wire format. SQS carries at most 10 message attributes, so the envelope
// fields most useful to other tools (and to SNS filter policies) get one
// String attribute each and the rest travel together as JSON in one more:
//
//	Postbus-Id              ID
//	Postbus-Type            Type
//	Postbus-Kind            "command", "event", "reply" (or the number)
//	Postbus-Content-Type    ContentType
//	Postbus-Correlation-Id  CorrelationID
//	Postbus-Source          Source
//	Postbus-Destination     Destination
//	Postbus-Sent-At         SentAt, RFC 3339 with nanoseconds, UTC
//	Postbus-Body            how the body is encoded: absent for text,
//	                        "base64" or "empty"
//	Postbus-Envelope        JSON object with "due" (DueAt), "exp"
//	                        (ExpiresAt), "key" (OrderingKey), "h" (Headers),
//	                        "a" (Attributes), "s" (StickyAttributes)
//
// Empty strings, zero times and empty maps are left out, so a plain message
// has 8 attributes and no Postbus-Envelope. SQS bodies and attribute values
// must be Unicode text without most control characters: a body that is not
// (invalid UTF-8, a NUL byte) is sent base64-encoded, and an empty body as
// "-" with Postbus-Body "empty" (SQS refuses empty bodies). Every string
// value is written as it is unless it holds '%', a control character other
// than tab, LF and CR, a byte of invalid UTF-8 or U+FFFE/U+FFFF; those bytes
// are then written as %XX, so every value round-trips exactly.
const (
	attrID            = driver.KeyID
	attrType          = driver.KeyType
	attrKind          = driver.KeyKind
	attrContentType   = driver.KeyContentType
	attrCorrelationID = driver.KeyCorrelationID
	attrSource        = driver.KeySource
	attrDestination   = driver.KeyDestination
	attrSentAt        = driver.KeySentAt
	attrBody          = "Postbus-Body"
	attrEnvelope      = "Postbus-Envelope"

	bodyBase64 = "base64"
	bodyEmpty  = "empty"

	dataTypeString = "String"
)

// values is the escape of attribute values and of the strings in
// Postbus-Envelope: SQS takes the XML characters, and reads any %XX.
var values = driver.Percent{KeepControl: "\t\n\r", UTF8: true, LowerHex: true}

// mapping carries the fields with an attribute of their own.
var mapping = driver.Mapping{
	Keys: driver.Keys{
		ID: attrID, Type: attrType, Kind: attrKind, ContentType: attrContentType, CorrelationID: attrCorrelationID,
		Source: attrSource, Destination: attrDestination, SentAt: attrSentAt,
	},
	Values: values,
}

// attribute is one String message attribute.
type attribute struct{ name, value string }

// extra is the JSON of Postbus-Envelope.
type extra struct {
	Due    string            `json:"due,omitempty"`
	Exp    string            `json:"exp,omitempty"`
	Key    string            `json:"key,omitempty"`
	Header map[string]string `json:"h,omitempty"`
	Attr   map[string]string `json:"a,omitempty"`
	Sticky map[string]string `json:"s,omitempty"`
}

// wireMessage is an envelope encoded for SQS or SNS.
type wireMessage struct {
	body  string
	attrs []attribute
}

// size is the message size as SQS and SNS count it: the body plus each
// attribute's name, data type and value.
func (w wireMessage) size() int {
	n := len(w.body)
	for _, a := range w.attrs {
		n += len(a.name) + len(dataTypeString) + len(a.value)
	}
	return n
}

// encode builds the wire message of env and refuses one over
// MaxMessageBytes.
func encode(env *bus.Envelope) (wireMessage, error) {
	var w wireMessage
	w.attrs = make([]attribute, 0, 10)
	add := func(name, v string) { w.attrs = append(w.attrs, attribute{name, v}) }
	// The mapping sets no size limits (the whole message is checked
	// below), so Encode cannot fail.
	_ = mapping.Encode(env, add)
	switch {
	case len(env.Body) == 0:
		w.body = "-"
		add(attrBody, bodyEmpty)
	case validBody(env.Body):
		w.body = string(env.Body)
	default:
		w.body = base64.StdEncoding.EncodeToString(env.Body)
		add(attrBody, bodyBase64)
	}
	x := extra{
		Due:    driver.FormatTime(env.DueAt),
		Exp:    driver.FormatTime(env.ExpiresAt),
		Key:    values.Escape(env.OrderingKey),
		Header: driver.EscapeMap(values, env.Headers),
		Attr:   driver.EscapeMap(values, env.Attributes),
		Sticky: driver.EscapeMap(values, env.StickyAttributes),
	}
	if x.Due != "" || x.Exp != "" || x.Key != "" || x.Header != nil || x.Attr != nil || x.Sticky != nil {
		js, err := json.Marshal(x)
		if err != nil {
			return w, fmt.Errorf("sqs: encode envelope %s: %w", env.ID, err)
		}
		w.attrs = append(w.attrs, attribute{attrEnvelope, string(js)})
	}
	if n := w.size(); n > MaxMessageBytes {
		return w, &MessageTooLargeError{ID: env.ID, Size: n, Limit: MaxMessageBytes}
	}
	return w, nil
}

// decode rebuilds the envelope of a received message from its body and
// String attributes. A message it cannot read still yields an envelope:
// the raw body, the ID if readable, the attributes (see foreignHeaders),
// and bus.HeaderDecodeError saying what was wrong.
func decode(body string, attrs map[string]string) *bus.Envelope {
	env, err := mapping.Decode(maps.All(attrs))
	if err == nil {
		err = decodeRest(env, body, attrs)
	}
	if err != nil {
		return driver.Undecodable("sqs", env.ID, []byte(body), foreignHeaders(attrs), err)
	}
	return env
}

// foreignHeaders keeps the attributes of a message decode could not read,
// so its copy in the error queue shows what arrived and, for a copy the
// bus wrote there before, why it failed: the headers of a readable
// Postbus-Envelope under their own keys, every other attribute as it
// arrived.
func foreignHeaders(attrs map[string]string) map[string]string {
	m := make(map[string]string, len(attrs)+1)
	for k, v := range attrs {
		m[k] = v
	}
	var x extra
	if js, ok := attrs[attrEnvelope]; ok && json.Unmarshal([]byte(js), &x) == nil {
		if h, err := driver.UnescapeMap(values, x.Header); err == nil {
			delete(m, attrEnvelope)
			for k, v := range h {
				m[k] = v
			}
		}
	}
	return m
}

// decodeRest reads the body and Postbus-Envelope into env.
func decodeRest(env *bus.Envelope, body string, attrs map[string]string) error {
	enc, err := values.Unescape(attrs[attrBody])
	if err != nil {
		return fmt.Errorf("attribute %s: %w", attrBody, err)
	}
	switch enc {
	case "":
		env.Body = []byte(body)
	case bodyEmpty:
	case bodyBase64:
		if env.Body, err = base64.StdEncoding.DecodeString(body); err != nil {
			return fmt.Errorf("base64 body: %w", err)
		}
	default:
		return fmt.Errorf("attribute %s: unknown encoding %q", attrBody, enc)
	}
	js, ok := attrs[attrEnvelope]
	if !ok {
		return nil
	}
	var x extra
	if err := json.Unmarshal([]byte(js), &x); err != nil {
		return fmt.Errorf("attribute %s: %w", attrEnvelope, err)
	}
	if env.DueAt, err = driver.ParseTime(x.Due); err != nil {
		return fmt.Errorf("attribute %s: due: %w", attrEnvelope, err)
	}
	if env.ExpiresAt, err = driver.ParseTime(x.Exp); err != nil {
		return fmt.Errorf("attribute %s: exp: %w", attrEnvelope, err)
	}
	if env.OrderingKey, err = values.Unescape(x.Key); err != nil {
		return fmt.Errorf("attribute %s: key: %w", attrEnvelope, err)
	}
	for _, m := range [...]struct {
		src map[string]string
		dst *map[string]string
	}{{x.Header, &env.Headers}, {x.Attr, &env.Attributes}, {x.Sticky, &env.StickyAttributes}} {
		if *m.dst, err = driver.UnescapeMap(values, m.src); err != nil {
			return fmt.Errorf("attribute %s: %w", attrEnvelope, err)
		}
	}
	return nil
}

// validBody reports whether b can be an SQS body as it is: valid UTF-8 of
// the characters SQS allows (#x9, #xA, #xD, #x20 to #xD7FF, #xE000 to
// #xFFFD, #x10000 to #x10FFFF).
func validBody(b []byte) bool {
	for len(b) > 0 {
		c := b[0]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
				return false
			}
			b = b[1:]
			continue
		}
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		b = b[n:]
	}
	return true
}
