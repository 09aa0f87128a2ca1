package driver

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// The reserved header names of the envelope fields, as NATS and SQS carry
// them. Kafka and RabbitMQ use the same names in lower case (Keys.Lower).
const (
	KeyID            = "Postbus-Id"
	KeyType          = "Postbus-Type"
	KeyKind          = "Postbus-Kind"
	KeyContentType   = "Postbus-Content-Type"
	KeyCorrelationID = "Postbus-Correlation-Id"
	KeySource        = "Postbus-Source"
	KeyDestination   = "Postbus-Destination"
	KeySentAt        = "Postbus-Sent-At"
	KeyDueAt         = "Postbus-Due-At"
	KeyExpiresAt     = "Postbus-Expires-At"
	KeyOrderingKey   = "Postbus-Ordering-Key"
)

// Keys names the header that carries each envelope field on one transport.
// A field whose name is empty is not carried by the Mapping: the transport
// carries it some other way (a record key, a property, a JSON header) or
// not at all. Body never travels in a header.
type Keys struct {
	ID, Type, Kind, ContentType, CorrelationID, Source, Destination string
	SentAt, DueAt, ExpiresAt, OrderingKey                           string
	// Header, Attribute and Sticky start the header of each entry of
	// Envelope.Headers, Attributes and StickyAttributes; the entry's key
	// follows, escaped with Mapping.MapKeys. Empty: the map is not carried.
	Header, Attribute, Sticky string
}

// DefaultKeys returns the reserved names (KeyID and the rest) and the map
// prefixes "Postbus-H-", "Postbus-A-" and "Postbus-S-".
func DefaultKeys() Keys {
	return Keys{
		ID: KeyID, Type: KeyType, Kind: KeyKind, ContentType: KeyContentType, CorrelationID: KeyCorrelationID,
		Source: KeySource, Destination: KeyDestination, SentAt: KeySentAt, DueAt: KeyDueAt,
		ExpiresAt: KeyExpiresAt, OrderingKey: KeyOrderingKey,
		Header: "Postbus-H-", Attribute: "Postbus-A-", Sticky: "Postbus-S-",
	}
}

// Lower returns k with every name and prefix in lower case.
func (k Keys) Lower() Keys {
	for _, p := range k.fields() {
		*p = strings.ToLower(*p)
	}
	return k
}

func (k *Keys) fields() []*string {
	return []*string{&k.ID, &k.Type, &k.Kind, &k.ContentType, &k.CorrelationID, &k.Source, &k.Destination,
		&k.SentAt, &k.DueAt, &k.ExpiresAt, &k.OrderingKey, &k.Header, &k.Attribute, &k.Sticky}
}

// Mapping maps an envelope to string key/value headers and back, with the
// charset and size rules of one broker.
type Mapping struct {
	// Keys names the headers.
	Keys Keys
	// Values escapes every value. Nil: values as they are (Verbatim).
	Values Escaper
	// MapKeys escapes the key of a map entry after its prefix. Nil:
	// as they are.
	MapKeys Escaper
	// KindNumber writes Kind as a decimal number and reads only 1 to 3
	// (Kafka). Default: FormatKind's text.
	KindNumber bool
	// MaxKey and MaxValue bound each header's key and escaped value in
	// bytes: Encode refuses a longer one with a *SizeError. Zero: no bound.
	MaxKey, MaxValue int
}

func (m Mapping) values() Escaper { return orVerbatim(m.Values) }

func orVerbatim(e Escaper) Escaper {
	if e == nil {
		return Verbatim{}
	}
	return e
}

// SizeError is returned by Mapping.Encode for a header longer than the
// broker takes. Sending again cannot help: it matches bus.ErrPermanent.
type SizeError struct {
	Key   string // the header's key
	What  string // "key" or "value"
	Size  int    // its length in bytes, escaped
	Limit int
}

// Error describes the failure.
func (e *SizeError) Error() string {
	return fmt.Sprintf("header %s: %s is %d bytes, more than %d", e.Key, e.What, e.Size, e.Limit)
}

// Is reports whether target is bus.ErrPermanent.
func (e *SizeError) Is(target error) bool { return target == bus.ErrPermanent }

// Encode calls set for each header of env: the fields that are carried and
// not empty (zero times and Kind 0 are empty), then every map entry, empty
// values included. It returns a *SizeError, after calling set for the
// headers before it, when a header breaks MaxKey or MaxValue.
func (m Mapping) Encode(env *bus.Envelope, set func(key, value string)) error {
	val, mk := m.values(), orVerbatim(m.MapKeys)
	put := func(k, v string) error {
		if k == "" {
			return nil
		}
		v = val.Escape(v)
		if m.MaxKey > 0 && len(k) > m.MaxKey {
			return &SizeError{Key: k, What: "key", Size: len(k), Limit: m.MaxKey}
		}
		if m.MaxValue > 0 && len(v) > m.MaxValue {
			return &SizeError{Key: k, What: "value", Size: len(v), Limit: m.MaxValue}
		}
		set(k, v)
		return nil
	}
	for _, f := range m.fixed(env) {
		if *f.v == "" {
			continue
		}
		if err := put(f.key, *f.v); err != nil {
			return err
		}
	}
	for _, e := range m.maps(env) {
		if e.prefix == "" {
			continue
		}
		for k, v := range *e.m {
			if err := put(e.prefix+mk.Escape(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

type fixedField struct {
	key string
	v   *string
}

// fixed lists the string fields of env, with the text of Kind and of the
// times in strings of their own.
func (m Mapping) fixed(env *bus.Envelope) []fixedField {
	kind, sent, due, exp := m.formatKind(env.Kind), FormatTime(env.SentAt), FormatTime(env.DueAt), FormatTime(env.ExpiresAt)
	k := m.Keys
	return []fixedField{
		{k.ID, &env.ID}, {k.Type, &env.Type}, {k.Kind, &kind}, {k.ContentType, &env.ContentType},
		{k.CorrelationID, &env.CorrelationID}, {k.Source, &env.Source}, {k.Destination, &env.Destination},
		{k.SentAt, &sent}, {k.DueAt, &due}, {k.ExpiresAt, &exp}, {k.OrderingKey, &env.OrderingKey},
	}
}

type mapField struct {
	prefix string
	m      *map[string]string
}

func (m Mapping) maps(env *bus.Envelope) []mapField {
	return []mapField{{m.Keys.Header, &env.Headers}, {m.Keys.Attribute, &env.Attributes}, {m.Keys.Sticky, &env.StickyAttributes}}
}

func (m Mapping) formatKind(k bus.Kind) string {
	if m.KindNumber {
		if k == 0 {
			return ""
		}
		return strconv.Itoa(int(k))
	}
	return FormatKind(k)
}

// Decode rebuilds an envelope (without its Body) from headers, given as
// key/value pairs; a key given twice keeps its last value, and keys the
// Mapping does not name are ignored. It reads what it can: on error the
// envelope holds every field that decoded, and the error wraps one
// *HeaderError per header it could not read (a missing Type among them),
// its text theirs joined by "; ".
func (m Mapping) Decode(headers iter.Seq2[string, string]) (*bus.Envelope, error) {
	env := &bus.Envelope{}
	val, mk := m.values(), orVerbatim(m.MapKeys)
	k := &m.Keys
	keys := [...]string{k.ID, k.Type, k.Kind, k.ContentType, k.CorrelationID, k.Source, k.Destination,
		k.SentAt, k.DueAt, k.ExpiresAt, k.OrderingKey}
	var raw [len(keys)]string
	var seen [len(keys)]bool
	maps := [...]mapField{{k.Header, &env.Headers}, {k.Attribute, &env.Attributes}, {k.Sticky, &env.StickyAttributes}}
	var errs []error
	for key, v := range headers {
		if i := indexKey(&keys, key); i >= 0 {
			raw[i], seen[i] = v, true
			continue
		}
		for _, e := range maps {
			if e.prefix == "" || !strings.HasPrefix(key, e.prefix) {
				continue
			}
			if err := putEntry(e.m, key[len(e.prefix):], v, mk, val); err != nil {
				errs = append(errs, &HeaderError{Key: key, Reason: err.Error(), Err: err})
			}
			break
		}
	}
	var kind, sent, due, exp string
	dsts := [len(keys)]*string{&env.ID, &env.Type, &kind, &env.ContentType, &env.CorrelationID, &env.Source,
		&env.Destination, &sent, &due, &exp, &env.OrderingKey}
	for i := range raw {
		if !seen[i] {
			continue
		}
		v, err := val.Unescape(raw[i])
		if err != nil {
			errs = append(errs, &HeaderError{Key: keys[i], Reason: err.Error(), Err: err})
			continue
		}
		*dsts[i] = v
	}
	if env.Type == "" && k.Type != "" {
		errs = append(errs, &HeaderError{Key: k.Type, Reason: "missing"})
	}
	var err error
	if env.Kind, err = m.parseKind(kind); err != nil {
		errs = append(errs, &HeaderError{Key: k.Kind, Reason: err.Error(), Err: err})
	}
	for _, t := range [...]struct {
		key, v string
		dst    *time.Time
	}{{k.SentAt, sent, &env.SentAt}, {k.DueAt, due, &env.DueAt}, {k.ExpiresAt, exp, &env.ExpiresAt}} {
		if *t.dst, err = ParseTime(t.v); err != nil {
			errs = append(errs, &HeaderError{Key: t.key, Reason: err.Error(), Err: err})
		}
	}
	if len(errs) == 0 {
		return env, nil
	}
	slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return env, headerErrors(errs)
}

// indexKey returns the index of key among the non-empty keys, or -1.
func indexKey(keys *[11]string, key string) int {
	for i, k := range keys {
		if k != "" && k == key {
			return i
		}
	}
	return -1
}

// putEntry unescapes one map entry into *m.
func putEntry(m *map[string]string, escKey, v string, mk, val Escaper) error {
	k, err := mk.Unescape(escKey)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if v, err = val.Unescape(v); err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	(*m)[k] = v
	return nil
}

// headerErrors are the problems of one message, in one line.
type headerErrors []error

func (e headerErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e headerErrors) Unwrap() []error { return e }

func (m Mapping) parseKind(s string) (bus.Kind, error) {
	if !m.KindNumber || s == "" {
		return ParseKind(s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < int(bus.KindCommand) || n > int(bus.KindReply) {
		return 0, fmt.Errorf("bad kind %q", s)
	}
	return bus.Kind(n), nil
}

// ErrMalformedHeader is wrapped by every *HeaderError.
var ErrMalformedHeader = errors.New("malformed header")

// HeaderError reports a header a decoder cannot read: the message was
// written by another tool, or by a newer release, or damaged on the way.
// Transports do not drop such a message: they hand it to the bus with the
// reason in bus.HeaderDecodeError (see Undecodable), which moves it to the
// error queue.
type HeaderError struct {
	Key    string // the header's key
	Reason string // what is wrong with it
	Err    error  // the underlying error, if any
}

// Error describes the failure.
func (e *HeaderError) Error() string { return "header " + e.Key + ": " + e.Reason }

// Unwrap returns ErrMalformedHeader and the underlying error.
func (e *HeaderError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrMalformedHeader}
	}
	return []error{ErrMalformedHeader, e.Err}
}

// Undecodable returns the envelope a transport hands to the bus for a
// message it cannot decode: the raw body, the ID when it could read it,
// headers (what arrived, see Mapping.Foreign; may be nil), and
// bus.HeaderDecodeError set to the transport's name and err, so the bus
// moves the message to the error queue with the reason.
func Undecodable(transport, id string, body []byte, headers map[string]string, err error) *bus.Envelope {
	env := &bus.Envelope{ID: id, Body: body, Headers: headers}
	env.SetHeader(bus.HeaderDecodeError, transport+": "+err.Error())
	return env
}

// Foreign keeps the headers of a message Decode could not read, so its
// copy in the error queue shows what arrived and, for a copy the bus wrote
// there before, why it failed: an entry of the Header map that unescapes
// goes under its own key, every other header as it arrived.
func (m Mapping) Foreign(headers iter.Seq2[string, string]) map[string]string {
	out := make(map[string]string)
	val, mk := m.values(), orVerbatim(m.MapKeys)
	for key, v := range headers {
		if name, ok := strings.CutPrefix(key, m.Keys.Header); ok && m.Keys.Header != "" {
			k, kerr := mk.Unescape(name)
			uv, verr := val.Unescape(v)
			if kerr == nil && verr == nil {
				out[k] = uv
				continue
			}
		}
		out[key] = v
	}
	return out
}

// FormatKind writes k as text: "" for 0, "command", "event", "reply", or
// the number of any other kind (see bus.Kind.MarshalText).
func FormatKind(k bus.Kind) string {
	text, _ := k.MarshalText()
	return string(text)
}

// ParseKind reads what FormatKind wrote.
func ParseKind(s string) (bus.Kind, error) {
	var k bus.Kind
	err := k.UnmarshalText([]byte(s))
	return k, err
}

// FormatTime writes t in RFC 3339 with nanoseconds, in UTC; "" for the
// zero time.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseTime reads what FormatTime wrote, in UTC; "" is the zero time.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// EscapeMap returns m with every key and value escaped by e; nil for an
// empty m.
func EscapeMap(e Escaper, m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[e.Escape(k)] = e.Escape(v)
	}
	return out
}

// UnescapeMap reverses EscapeMap; nil for an empty m.
func UnescapeMap(e Escaper, m map[string]string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		uk, err := e.Unescape(k)
		if err != nil {
			return nil, err
		}
		uv, err := e.Unescape(v)
		if err != nil {
			return nil, err
		}
		out[uk] = uv
	}
	return out, nil
}
