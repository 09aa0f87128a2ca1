package nats

import (
	"errors"
	"fmt"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/postbus/bus"
)

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
// %XX, so every value round-trips exactly.
const (
	hdrID            = "Postbus-Id"
	hdrType          = "Postbus-Type"
	hdrKind          = "Postbus-Kind"
	hdrContentType   = "Postbus-Content-Type"
	hdrCorrelationID = "Postbus-Correlation-Id"
	hdrSource        = "Postbus-Source"
	hdrDestination   = "Postbus-Destination"
	hdrSentAt        = "Postbus-Sent-At"
	hdrDueAt         = "Postbus-Due-At"
	hdrExpiresAt     = "Postbus-Expires-At"
	hdrOrderingKey   = "Postbus-Ordering-Key"
	hdrHeaderPrefix  = "Postbus-H-"
	hdrAttrPrefix    = "Postbus-A-"
	hdrStickyPrefix  = "Postbus-S-"
)

// encodeMsg builds the NATS message for env on subject; origin names the
// delivery being handled when the send was made (see msgID).
func encodeMsg(subject string, env *bus.Envelope, origin string) *natsio.Msg {
	h := make(natsio.Header, 12+len(env.Headers)+len(env.Attributes)+len(env.StickyAttributes))
	set := func(k, v string) {
		if v != "" {
			h[k] = []string{escapeValue(v)}
		}
	}
	set(hdrID, env.ID)
	set(hdrType, env.Type)
	set(hdrKind, kindString(env.Kind))
	set(hdrContentType, env.ContentType)
	set(hdrCorrelationID, env.CorrelationID)
	set(hdrSource, env.Source)
	set(hdrDestination, env.Destination)
	set(hdrSentAt, formatTime(env.SentAt))
	set(hdrDueAt, formatTime(env.DueAt))
	set(hdrExpiresAt, formatTime(env.ExpiresAt))
	set(hdrOrderingKey, env.OrderingKey)
	for _, m := range [...]struct {
		prefix string
		pairs  map[string]string
	}{{hdrHeaderPrefix, env.Headers}, {hdrAttrPrefix, env.Attributes}, {hdrStickyPrefix, env.StickyAttributes}} {
		for k, v := range m.pairs {
			h[m.prefix+escapeToken(k)] = []string{escapeValue(v)}
		}
	}
	if env.ID != "" {
		h[jetstream.MsgIDHeader] = []string{msgID(subject, env, origin)}
	}
	return &natsio.Msg{Subject: subject, Header: h, Data: env.Body}
}

// decodeMsg rebuilds the envelope of a received message. A message it
// cannot read still yields an envelope: the raw body, the ID if readable,
// every header as text (see foreignHeaders), and bus.HeaderDecodeError
// saying what was wrong.
func decodeMsg(h natsio.Header, body []byte) *bus.Envelope {
	env, err := decodeHeaders(h)
	if err != nil {
		id, _ := unescapeValue(h.Get(hdrID))
		env = &bus.Envelope{ID: id, Body: body, Headers: foreignHeaders(h)}
		env.SetHeader(bus.HeaderDecodeError, "nats: "+err.Error())
		return env
	}
	env.Body = body
	return env
}

// foreignHeaders keeps the headers of a message decodeMsg could not read,
// so its copy in the error queue shows what arrived and, for a copy the
// bus wrote there before, why it failed: a Postbus-H- header that
// unescapes under its own key, every other header as it arrived.
func foreignHeaders(h natsio.Header) map[string]string {
	m := make(map[string]string, len(h)+1)
	for key, vals := range h {
		if len(vals) == 0 {
			continue
		}
		if name, ok := strings.CutPrefix(key, hdrHeaderPrefix); ok {
			k, kerr := unescapeToken(name)
			v, verr := unescapeValue(vals[0])
			if kerr == nil && verr == nil {
				m[k] = v
				continue
			}
		}
		m[key] = vals[0]
	}
	return m
}

var errMissingType = errors.New("missing " + hdrType + " header")

func decodeHeaders(h natsio.Header) (*bus.Envelope, error) {
	env := &bus.Envelope{}
	var err error
	str := func(key string, dst *string) {
		if err != nil || len(h[key]) == 0 {
			return
		}
		var v string
		if v, err = unescapeValue(h[key][0]); err != nil {
			err = fmt.Errorf("header %s: %w", key, err)
			return
		}
		*dst = v
	}
	var kind, sent, due, expires string
	str(hdrID, &env.ID)
	str(hdrType, &env.Type)
	str(hdrKind, &kind)
	str(hdrContentType, &env.ContentType)
	str(hdrCorrelationID, &env.CorrelationID)
	str(hdrSource, &env.Source)
	str(hdrDestination, &env.Destination)
	str(hdrSentAt, &sent)
	str(hdrDueAt, &due)
	str(hdrExpiresAt, &expires)
	str(hdrOrderingKey, &env.OrderingKey)
	if err != nil {
		return nil, err
	}
	if env.Type == "" {
		return nil, errMissingType
	}
	if env.Kind, err = parseKind(kind); err != nil {
		return nil, err
	}
	for _, tm := range [...]struct {
		key string
		src string
		dst *time.Time
	}{{hdrSentAt, sent, &env.SentAt}, {hdrDueAt, due, &env.DueAt}, {hdrExpiresAt, expires, &env.ExpiresAt}} {
		if *tm.dst, err = parseTime(tm.src); err != nil {
			return nil, fmt.Errorf("header %s: %w", tm.key, err)
		}
	}
	for key, vals := range h {
		dst, name, ok := mapFor(env, key)
		if !ok || len(vals) == 0 {
			continue
		}
		k, err := unescapeToken(name)
		if err != nil {
			return nil, fmt.Errorf("header %s: key: %w", key, err)
		}
		v, err := unescapeValue(vals[0])
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", key, err)
		}
		if *dst == nil {
			*dst = make(map[string]string, 4)
		}
		(*dst)[k] = v
	}
	return env, nil
}

// mapFor returns the envelope map a map header belongs to and the escaped key.
func mapFor(env *bus.Envelope, key string) (*map[string]string, string, bool) {
	switch {
	case strings.HasPrefix(key, hdrHeaderPrefix):
		return &env.Headers, key[len(hdrHeaderPrefix):], true
	case strings.HasPrefix(key, hdrAttrPrefix):
		return &env.Attributes, key[len(hdrAttrPrefix):], true
	case strings.HasPrefix(key, hdrStickyPrefix):
		return &env.StickyAttributes, key[len(hdrStickyPrefix):], true
	}
	return nil, "", false
}

func kindString(k bus.Kind) string {
	text, _ := k.MarshalText()
	return string(text)
}

func parseKind(s string) (bus.Kind, error) {
	var k bus.Kind
	if err := k.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("header %s: %w", hdrKind, err)
	}
	return k, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// escapeValue makes v safe as a header value (see the wire format above).
func escapeValue(v string) string {
	if !needsEscape(v) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 8)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c == 0x7f || c == '%' || isBlank(c) && (i == 0 || i == len(v)-1) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(v string) bool {
	if v == "" {
		return false
	}
	if isBlank(v[0]) || isBlank(v[len(v)-1]) {
		return true
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f || c == '%' {
			return true
		}
	}
	return false
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// unescapeValue reverses escapeValue.
func unescapeValue(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			out = append(out, v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", fmt.Errorf("%w: truncated %%-escape", errBadEscape)
		}
		hi, lo := unhex(v[i+1]), unhex(v[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q", errBadEscape, v[i:i+3])
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	return string(out), nil
}
