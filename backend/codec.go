package backend

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Envelope encoding. Stores keep envelopes as opaque bytes and transports
// without rich message properties carry them whole, so the format is compact
// and fast: a two-byte preamble ('P', version), then the fields in a fixed
// order, strings and byte slices prefixed by their uvarint length, maps by
// their pair count, times as varint Unix nanoseconds (0 for the zero time).
// A correlation ID equal to the message ID (the start of a conversation, the
// common case) is not written twice: bit 7 of the kind byte says so.
// Version 2 adds the ordering key after the body; an envelope without one is
// still written as version 1, and both versions decode.
// FuzzUnmarshalEnvelope keeps the decoder honest against arbitrary input.

const (
	codecMagic   = 'P'
	codecVersion = 1
	codecV2      = 2    // version 1 plus a trailing ordering key
	kindCorrIsID = 0x80 // the correlation ID equals the ID and is omitted
	kindMask     = 0x7f
)

// MarshalEnvelope encodes an envelope for a store or a transport.
func MarshalEnvelope(e *Envelope) []byte {
	kind, corr := byte(e.Kind)&kindMask, e.CorrelationID
	if corr == e.ID && corr != "" {
		kind, corr = kind|kindCorrIsID, ""
	}
	n := 2 + 1 + 9*3 + len(e.ID) + len(e.Type) + len(e.ContentType) + len(corr) +
		len(e.Source) + len(e.Destination) + len(e.Body) + 6*2 + 3*2
	for _, m := range [...]map[string]string{e.Headers, e.Attributes, e.StickyAttributes} {
		for k, v := range m {
			n += len(k) + len(v) + 4
		}
	}
	version := byte(codecVersion)
	if e.OrderingKey != "" {
		version, n = codecV2, n+len(e.OrderingKey)+3
	}
	b := make([]byte, 0, n)
	b = append(b, codecMagic, version, kind)
	for _, s := range [...]string{e.ID, e.Type, e.ContentType, corr, e.Source, e.Destination} {
		b = appendString(b, s)
	}
	for _, t := range [...]time.Time{e.SentAt, e.DueAt, e.ExpiresAt} {
		b = appendTime(b, t)
	}
	for _, m := range [...]map[string]string{e.Headers, e.Attributes, e.StickyAttributes} {
		b = binary.AppendUvarint(b, uint64(len(m)))
		for k, v := range m {
			b = appendString(b, k)
			b = appendString(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(e.Body)))
	b = append(b, e.Body...)
	if version == codecV2 {
		b = appendString(b, e.OrderingKey)
	}
	return b
}

// UnmarshalEnvelope decodes what MarshalEnvelope produced. Malformed input
// returns an error wrapping ErrMalformedEnvelope; it never panics.
func UnmarshalEnvelope(data []byte) (*Envelope, error) {
	if len(data) < 3 || data[0] != codecMagic {
		return nil, fmt.Errorf("%w: missing preamble", ErrMalformedEnvelope)
	}
	if data[1] != codecVersion && data[1] != codecV2 {
		return nil, fmt.Errorf("%w: unknown version %d", ErrMalformedEnvelope, data[1])
	}
	d := decoder{buf: data[3:]}
	e := &Envelope{Kind: Kind(data[2] & kindMask)}
	for _, s := range [...]*string{&e.ID, &e.Type, &e.ContentType, &e.CorrelationID, &e.Source, &e.Destination} {
		*s = d.string()
	}
	for _, t := range [...]*time.Time{&e.SentAt, &e.DueAt, &e.ExpiresAt} {
		*t = d.time()
	}
	e.Headers = d.stringMap()
	e.Attributes = d.stringMap()
	e.StickyAttributes = d.stringMap()
	e.Body = d.bytes()
	if data[1] == codecV2 {
		if e.OrderingKey = d.string(); e.OrderingKey == "" && d.err == nil {
			return nil, fmt.Errorf("%w: empty ordering key in a version 2 envelope", ErrMalformedEnvelope)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if data[2]&kindCorrIsID != 0 {
		if e.CorrelationID != "" {
			return nil, fmt.Errorf("%w: correlation ID both implied and written", ErrMalformedEnvelope)
		}
		e.CorrelationID = e.ID
	}
	if len(d.buf) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformedEnvelope, len(d.buf))
	}
	return e, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrMalformedEnvelope, what)
	}
	d.buf = nil
}

func (d *decoder) length(what string) int {
	n, k := binary.Uvarint(d.buf)
	if k <= 0 || n > uint64(len(d.buf)-k) {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[k:]
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.length("bytes")
	if d.err != nil {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) time() time.Time {
	v, k := binary.Varint(d.buf)
	if k <= 0 {
		d.fail("time")
		return time.Time{}
	}
	d.buf = d.buf[k:]
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

// stringMap decodes a map; nil when it is empty.
func (d *decoder) stringMap() map[string]string {
	n, k := binary.Uvarint(d.buf)
	if k <= 0 || n > uint64(len(d.buf)) { // each pair takes at least two bytes
		d.fail("map")
		return nil
	}
	d.buf = d.buf[k:]
	if n == 0 {
		return nil
	}
	var m map[string]string
	for range n {
		key, value := d.bytes(), d.bytes()
		if d.err != nil {
			return nil
		}
		if m == nil {
			m = make(map[string]string, n)
		}
		m[string(key)] = string(value)
	}
	return m
}
