package sqs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
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
	attrID            = "Postbus-Id"
	attrType          = "Postbus-Type"
	attrKind          = "Postbus-Kind"
	attrContentType   = "Postbus-Content-Type"
	attrCorrelationID = "Postbus-Correlation-Id"
	attrSource        = "Postbus-Source"
	attrDestination   = "Postbus-Destination"
	attrSentAt        = "Postbus-Sent-At"
	attrBody          = "Postbus-Body"
	attrEnvelope      = "Postbus-Envelope"

	bodyBase64 = "base64"
	bodyEmpty  = "empty"

	dataTypeString = "String"
)

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
	set := func(name, v string) {
		if v != "" {
			w.attrs = append(w.attrs, attribute{name, escapeValue(v)})
		}
	}
	set(attrID, env.ID)
	set(attrType, env.Type)
	set(attrKind, kindString(env.Kind))
	set(attrContentType, env.ContentType)
	set(attrCorrelationID, env.CorrelationID)
	set(attrSource, env.Source)
	set(attrDestination, env.Destination)
	set(attrSentAt, formatTime(env.SentAt))
	switch {
	case len(env.Body) == 0:
		w.body = "-"
		set(attrBody, bodyEmpty)
	case validBody(env.Body):
		w.body = string(env.Body)
	default:
		w.body = base64.StdEncoding.EncodeToString(env.Body)
		set(attrBody, bodyBase64)
	}
	x := extra{
		Due:    formatTime(env.DueAt),
		Exp:    formatTime(env.ExpiresAt),
		Key:    escapeValue(env.OrderingKey),
		Header: escapeMap(env.Headers),
		Attr:   escapeMap(env.Attributes),
		Sticky: escapeMap(env.StickyAttributes),
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
// the raw body, the ID if readable, and bus.HeaderDecodeError saying what
// was wrong.
func decode(body string, attrs map[string]string) *bus.Envelope {
	env, err := decodeAttrs(body, attrs)
	if err != nil {
		id, _ := unescapeValue(attrs[attrID])
		env = &bus.Envelope{ID: id, Body: []byte(body), Headers: foreignHeaders(attrs)}
		env.SetHeader(bus.HeaderDecodeError, "sqs: "+err.Error())
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
		if h, err := unescapeMap(x.Header); err == nil {
			delete(m, attrEnvelope)
			for k, v := range h {
				m[k] = v
			}
		}
	}
	return m
}

var errMissingType = errors.New("missing " + attrType + " attribute")

func decodeAttrs(body string, attrs map[string]string) (*bus.Envelope, error) {
	env := &bus.Envelope{}
	var err error
	str := func(name string, dst *string) {
		v, ok := attrs[name]
		if err != nil || !ok {
			return
		}
		if *dst, err = unescapeValue(v); err != nil {
			err = fmt.Errorf("attribute %s: %w", name, err)
		}
	}
	var kind, sent, enc string
	str(attrID, &env.ID)
	str(attrType, &env.Type)
	str(attrKind, &kind)
	str(attrContentType, &env.ContentType)
	str(attrCorrelationID, &env.CorrelationID)
	str(attrSource, &env.Source)
	str(attrDestination, &env.Destination)
	str(attrSentAt, &sent)
	str(attrBody, &enc)
	if err != nil {
		return nil, err
	}
	if env.Type == "" {
		return nil, errMissingType
	}
	if env.Kind, err = parseKind(kind); err != nil {
		return nil, err
	}
	if env.SentAt, err = parseTime(sent); err != nil {
		return nil, fmt.Errorf("attribute %s: %w", attrSentAt, err)
	}
	switch enc {
	case "":
		env.Body = []byte(body)
	case bodyEmpty:
	case bodyBase64:
		if env.Body, err = base64.StdEncoding.DecodeString(body); err != nil {
			return nil, fmt.Errorf("base64 body: %w", err)
		}
	default:
		return nil, fmt.Errorf("attribute %s: unknown encoding %q", attrBody, enc)
	}
	if js, ok := attrs[attrEnvelope]; ok {
		var x extra
		if err := json.Unmarshal([]byte(js), &x); err != nil {
			return nil, fmt.Errorf("attribute %s: %w", attrEnvelope, err)
		}
		if env.DueAt, err = parseTime(x.Due); err != nil {
			return nil, fmt.Errorf("attribute %s: due: %w", attrEnvelope, err)
		}
		if env.ExpiresAt, err = parseTime(x.Exp); err != nil {
			return nil, fmt.Errorf("attribute %s: exp: %w", attrEnvelope, err)
		}
		if env.OrderingKey, err = unescapeValue(x.Key); err != nil {
			return nil, fmt.Errorf("attribute %s: key: %w", attrEnvelope, err)
		}
		for _, m := range [...]struct {
			src map[string]string
			dst *map[string]string
		}{{x.Header, &env.Headers}, {x.Attr, &env.Attributes}, {x.Sticky, &env.StickyAttributes}} {
			if *m.dst, err = unescapeMap(m.src); err != nil {
				return nil, fmt.Errorf("attribute %s: %w", attrEnvelope, err)
			}
		}
	}
	return env, nil
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

func kindString(k bus.Kind) string {
	text, _ := k.MarshalText()
	return string(text)
}

func parseKind(s string) (bus.Kind, error) {
	var k bus.Kind
	if err := k.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("attribute %s: %w", attrKind, err)
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

func escapeMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[escapeValue(k)] = escapeValue(v)
	}
	return out
}

func unescapeMap(m map[string]string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		uk, err := unescapeValue(k)
		if err != nil {
			return nil, err
		}
		uv, err := unescapeValue(v)
		if err != nil {
			return nil, err
		}
		out[uk] = uv
	}
	return out, nil
}

// escapeValue makes v safe as an SQS attribute value (see the wire format).
func escapeValue(v string) string {
	if !needsEscape(v) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 8)
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c == '%' || c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
				writeEscaped(&b, c)
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && n == 1 || r == 0xFFFE || r == 0xFFFF {
			for j := range n {
				writeEscaped(&b, v[i+j])
			}
		} else {
			b.WriteString(v[i : i+n])
		}
		i += n
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func writeEscaped(b *strings.Builder, c byte) {
	b.WriteByte('%')
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0xf])
}

func needsEscape(v string) bool {
	return strings.IndexByte(v, '%') >= 0 || !validBody([]byte(v))
}

var errBadEscape = errors.New("bad %-escape")

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
			return "", fmt.Errorf("%w: truncated", errBadEscape)
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

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
