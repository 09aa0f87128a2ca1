package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
)

// The record of an envelope: the body is the record value, the ordering
// key the record key, and every other field a record header. Kafka headers
// are ordered byte strings, so empty values and any characters survive.
// User headers, attributes and sticky attributes keep their own key after
// a prefix.
const (
	hID            = "postbus-id"
	hType          = "postbus-type"
	hKind          = "postbus-kind"
	hContentType   = "postbus-content-type"
	hCorrelationID = "postbus-correlation-id"
	hSource        = "postbus-source"
	hDestination   = "postbus-destination"
	hSentAt        = "postbus-sent-at"
	hDueAt         = "postbus-due-at"
	hExpiresAt     = "postbus-expires-at"
	pHeader        = "h:"
	pAttribute     = "a:"
	pSticky        = "s:"
)

func encodeRecord(topic string, env *bus.Envelope) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 10+len(env.Headers)+len(env.Attributes)+len(env.StickyAttributes))
	add := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(hID, env.ID)
	add(hType, env.Type)
	add(hKind, strconv.Itoa(int(env.Kind)))
	add(hContentType, env.ContentType)
	if env.CorrelationID != "" {
		add(hCorrelationID, env.CorrelationID)
	}
	if env.Source != "" {
		add(hSource, env.Source)
	}
	if env.Destination != "" {
		add(hDestination, env.Destination)
	}
	for _, tm := range [...]struct {
		k string
		t time.Time
	}{{hSentAt, env.SentAt}, {hDueAt, env.DueAt}, {hExpiresAt, env.ExpiresAt}} {
		if !tm.t.IsZero() {
			add(tm.k, tm.t.UTC().Format(time.RFC3339Nano))
		}
	}
	for k, v := range env.Headers {
		add(pHeader+k, v)
	}
	for k, v := range env.Attributes {
		add(pAttribute+k, v)
	}
	for k, v := range env.StickyAttributes {
		add(pSticky+k, v)
	}
	r := &kgo.Record{Topic: topic, Value: env.Body, Headers: hs}
	if env.OrderingKey != "" {
		r.Key = []byte(env.OrderingKey)
	}
	return r
}

// decodeRecord reads an envelope. A record it cannot read still yields an
// envelope, with HeaderDecodeError set, so the core moves it to the error
// queue instead of it blocking the partition.
func decodeRecord(r *kgo.Record) *bus.Envelope {
	env := &bus.Envelope{Body: r.Value, OrderingKey: string(r.Key)}
	var bad []string
	set := func(m *map[string]string, k, v string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	parseTime := func(k, v string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			bad = append(bad, fmt.Sprintf("header %s: %v", k, err))
		}
		return t
	}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch k := h.Key; {
		case k == hID:
			env.ID = v
		case k == hType:
			env.Type = v
		case k == hKind:
			n, err := strconv.Atoi(v)
			if err != nil || n < int(bus.KindCommand) || n > int(bus.KindReply) {
				bad = append(bad, fmt.Sprintf("header %s: bad kind %q", k, v))
			}
			env.Kind = bus.Kind(n)
		case k == hContentType:
			env.ContentType = v
		case k == hCorrelationID:
			env.CorrelationID = v
		case k == hSource:
			env.Source = v
		case k == hDestination:
			env.Destination = v
		case k == hSentAt:
			env.SentAt = parseTime(k, v)
		case k == hDueAt:
			env.DueAt = parseTime(k, v)
		case k == hExpiresAt:
			env.ExpiresAt = parseTime(k, v)
		case strings.HasPrefix(k, pHeader):
			set(&env.Headers, k[len(pHeader):], v)
		case strings.HasPrefix(k, pAttribute):
			set(&env.Attributes, k[len(pAttribute):], v)
		case strings.HasPrefix(k, pSticky):
			set(&env.StickyAttributes, k[len(pSticky):], v)
		}
	}
	if env.ID == "" {
		env.ID = fmt.Sprintf("kafka-%s-%d-%d", r.Topic, r.Partition, r.Offset)
		bad = append(bad, "no message ID header")
	}
	if env.Type == "" {
		bad = append(bad, "no message type header")
	}
	if env.Kind == 0 && len(bad) == 0 {
		bad = append(bad, "no message kind header")
	}
	if len(bad) > 0 {
		env.SetHeader(bus.HeaderDecodeError, "kafka: undecodable record: "+strings.Join(bad, "; "))
	}
	return env
}
