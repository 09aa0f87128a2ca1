package rabbitmq

import (
	"cmp"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// AMQP header names the transport writes. Envelope fields with a matching
// AMQP property travel in the property; the rest travel in these headers.
const (
	// HeaderVersion marks a message written by this transport ("1"). A
	// delivery without it is foreign and reaches the handler with
	// bus.HeaderDecodeError set.
	HeaderVersion = "postbus-version"
	// HeaderKind is Envelope.Kind: "command", "event", "reply", or the
	// number for any other value.
	HeaderKind = "postbus-kind"
	// HeaderSource is Envelope.Source (omitted when empty).
	HeaderSource = "postbus-source"
	// HeaderDestination is Envelope.Destination (omitted when empty).
	HeaderDestination = "postbus-destination"
	// HeaderSentAt is Envelope.SentAt in RFC 3339 with nanoseconds, UTC.
	// The AMQP timestamp property carries it too, to the second.
	HeaderSentAt = "postbus-sent-at"
	// HeaderDueAt is Envelope.DueAt, like HeaderSentAt (omitted when zero).
	HeaderDueAt = "postbus-due-at"
	// HeaderExpiresAt is Envelope.ExpiresAt, like HeaderSentAt (omitted
	// when zero). The bus checks it on arrival, and logs, counts and
	// dead-letters what expired. The AMQP expiration property is only a
	// safety net a margin later (Options.ExpiryMargin), derived from
	// Envelope.ExpiresAt alone and never from timer headers: a message with
	// a zero ExpiresAt, such as a copy in the error or dead-letter queue,
	// never expires in the broker.
	HeaderExpiresAt = "postbus-expires-at"
	// HeaderOrderingKey is Envelope.OrderingKey (omitted when empty).
	// RabbitMQ keeps one queue in order but does not order by key across
	// concurrent consumers; the key travels for the handlers.
	HeaderOrderingKey = "postbus-ordering-key"
	// HeaderHeaders is a nested table holding Envelope.Headers.
	HeaderHeaders = "postbus-headers"
	// HeaderAttributes is a nested table holding Envelope.Attributes.
	HeaderAttributes = "postbus-attributes"
	// HeaderStickyAttributes is a nested table holding Envelope.StickyAttributes.
	HeaderStickyAttributes = "postbus-sticky-attributes"
)

const wireVersion = "1"

// toPublishing maps an envelope to a persistent AMQP message.
func toPublishing(env *bus.Envelope) (amqp.Publishing, error) {
	if env == nil {
		return amqp.Publishing{}, &FieldError{Field: "Envelope", Reason: "nil"}
	}
	for _, f := range []struct{ name, v string }{
		{"ID", env.ID}, {"Type", env.Type}, {"ContentType", env.ContentType}, {"CorrelationID", env.CorrelationID},
	} {
		if len(f.v) > maxShortString {
			return amqp.Publishing{}, &FieldError{Field: f.name, Reason: fmt.Sprintf("%d bytes; AMQP allows %d", len(f.v), maxShortString)}
		}
	}
	h := amqp.Table{HeaderVersion: wireVersion, HeaderKind: kindText(env.Kind)}
	if env.Source != "" {
		h[HeaderSource] = env.Source
	}
	if env.Destination != "" {
		h[HeaderDestination] = env.Destination
	}
	if env.OrderingKey != "" {
		h[HeaderOrderingKey] = env.OrderingKey
	}
	for _, f := range []struct {
		field, header string
		t             time.Time
	}{{"SentAt", HeaderSentAt, env.SentAt}, {"DueAt", HeaderDueAt, env.DueAt}, {"ExpiresAt", HeaderExpiresAt, env.ExpiresAt}} {
		if f.t.IsZero() {
			continue
		}
		if !inYearRange(f.t) {
			return amqp.Publishing{}, &FieldError{Field: f.field, Reason: "year outside 1..9999"}
		}
		h[f.header] = driver.FormatTime(f.t)
	}
	for _, f := range []struct {
		field, header string
		m             map[string]string
	}{{"Headers", HeaderHeaders, env.Headers}, {"Attributes", HeaderAttributes, env.Attributes}, {"StickyAttributes", HeaderStickyAttributes, env.StickyAttributes}} {
		if len(f.m) == 0 {
			continue
		}
		tab := make(amqp.Table, len(f.m))
		for k, v := range f.m {
			if len(k) > maxShortString {
				return amqp.Publishing{}, &FieldError{Field: f.field, Reason: fmt.Sprintf("key of %d bytes; AMQP allows %d", len(k), maxShortString)}
			}
			tab[k] = v
		}
		h[f.header] = tab
	}
	return amqp.Publishing{
		Headers:       h,
		ContentType:   env.ContentType,
		DeliveryMode:  amqp.Persistent,
		CorrelationId: env.CorrelationID,
		MessageId:     env.ID,
		Timestamp:     env.SentAt,
		Type:          env.Type,
		Body:          env.Body,
	}, nil
}

// fromDelivery maps a delivery back to an envelope. A delivery it cannot
// map still becomes an envelope: the raw body, what the properties give,
// every AMQP header as text, and bus.HeaderDecodeError saying why.
func fromDelivery(d *amqp.Delivery) *bus.Envelope {
	env := &bus.Envelope{
		ID:            d.MessageId,
		Type:          d.Type,
		ContentType:   d.ContentType,
		CorrelationID: d.CorrelationId,
		Body:          d.Body,
	}
	if err := decodeHeaders(env, d.Headers); err != nil {
		env.Headers = foreignHeaders(d.Headers)
		env.Attributes, env.StickyAttributes = nil, nil
		env.Source, env.Destination, env.OrderingKey = "", "", ""
		env.SentAt, env.DueAt, env.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
		if !d.Timestamp.IsZero() && inYearRange(d.Timestamp) {
			env.SentAt = d.Timestamp.UTC()
		}
		env.Kind = 0
		env.SetHeader(bus.HeaderDecodeError, "rabbitmq: "+err.Error())
	}
	return env
}

func decodeHeaders(env *bus.Envelope, h amqp.Table) error {
	switch v := h[HeaderVersion]; {
	case v == nil:
		return fmt.Errorf("not a Postbus message: no %s header", HeaderVersion)
	case v != wireVersion:
		return fmt.Errorf("unsupported %s %v", HeaderVersion, v)
	}
	kind, err := parseKind(h[HeaderKind])
	if err != nil {
		return err
	}
	env.Kind = kind
	for _, f := range []struct {
		header string
		dst    *string
	}{{HeaderSource, &env.Source}, {HeaderDestination, &env.Destination}, {HeaderOrderingKey, &env.OrderingKey}} {
		if *f.dst, err = optString(h, f.header); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		header string
		dst    *time.Time
	}{{HeaderSentAt, &env.SentAt}, {HeaderDueAt, &env.DueAt}, {HeaderExpiresAt, &env.ExpiresAt}} {
		s, err := optString(h, f.header)
		if err != nil {
			return err
		}
		if *f.dst, err = driver.ParseTime(s); err != nil {
			return fmt.Errorf("header %s: %w", f.header, err)
		}
		if !inYearRange(*f.dst) {
			return fmt.Errorf("header %s: %s: year outside 1..9999", f.header, s)
		}
	}
	for _, f := range []struct {
		header string
		dst    *map[string]string
	}{{HeaderHeaders, &env.Headers}, {HeaderAttributes, &env.Attributes}, {HeaderStickyAttributes, &env.StickyAttributes}} {
		if *f.dst, err = stringTable(h, f.header); err != nil {
			return err
		}
	}
	return nil
}

// inYearRange reports whether t, in UTC, falls in the years toPublishing
// can write: a delivery's time outside them (an AMQP timestamp is any
// 64-bit count of seconds) would make its error-queue copy unsendable.
func inYearRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

// kindText is the text of k; the zero kind is written "0" (the header is
// never left out).
func kindText(k bus.Kind) string { return cmp.Or(driver.FormatKind(k), "0") }

func parseKind(v any) (bus.Kind, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("header %s: want a string, got %T", HeaderKind, v)
	}
	k, err := driver.ParseKind(s)
	if err != nil || s == "" {
		return 0, fmt.Errorf("header %s: unknown kind %q", HeaderKind, s)
	}
	return k, nil
}

func optString(h amqp.Table, key string) (string, error) {
	switch v := h[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	default:
		return "", fmt.Errorf("header %s: want a string, got %T", key, v)
	}
}

func stringTable(h amqp.Table, key string) (map[string]string, error) {
	v, ok := h[key]
	if !ok {
		return nil, nil
	}
	tab, ok := v.(amqp.Table)
	if !ok {
		return nil, fmt.Errorf("header %s: want a table, got %T", key, v)
	}
	if len(tab) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(tab))
	for k, v := range tab {
		s, err := optString(tab, k)
		if err != nil {
			return nil, fmt.Errorf("header %s: key %q: want a string, got %T", key, k, v)
		}
		m[k] = s
	}
	return m, nil
}

// foreignHeaders renders every AMQP header as text, for a message the
// transport could not map, so the error queue shows what arrived.
func foreignHeaders(h amqp.Table) map[string]string {
	m := make(map[string]string, len(h)+1)
	for k, v := range h {
		switch v := v.(type) {
		case string:
			m[k] = v
		case []byte:
			m[k] = string(v)
		default:
			m[k] = fmt.Sprint(v)
		}
	}
	return m
}
