package kafka

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
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

// wire reads every header; rest writes those that encodeRecord does not
// write itself: the ID, type, kind and content type go first, even empty.
var (
	wire = driver.Mapping{
		Keys: driver.Keys{
			ID: hID, Type: hType, Kind: hKind, ContentType: hContentType, CorrelationID: hCorrelationID,
			Source: hSource, Destination: hDestination, SentAt: hSentAt, DueAt: hDueAt, ExpiresAt: hExpiresAt,
			Header: pHeader, Attribute: pAttribute, Sticky: pSticky,
		},
		KindNumber: true,
	}
	rest = driver.Mapping{
		Keys: driver.Keys{
			CorrelationID: hCorrelationID, Source: hSource, Destination: hDestination,
			SentAt: hSentAt, DueAt: hDueAt, ExpiresAt: hExpiresAt,
			Header: pHeader, Attribute: pAttribute, Sticky: pSticky,
		},
	}
)

func encodeRecord(topic string, env *bus.Envelope) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 10+len(env.Headers)+len(env.Attributes)+len(env.StickyAttributes))
	add := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	add(hID, env.ID)
	add(hType, env.Type)
	add(hKind, strconv.Itoa(int(env.Kind)))
	add(hContentType, env.ContentType)
	// Kafka headers are byte strings: no limits, so Encode cannot fail.
	_ = rest.Encode(env, add)
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
	env, err := wire.Decode(func(yield func(k, v string) bool) {
		for _, h := range r.Headers {
			if !yield(h.Key, string(h.Value)) {
				return
			}
		}
	})
	var bad []string
	if err != nil {
		bad = append(bad, err.Error())
	}
	if env.ID == "" {
		env.ID = fmt.Sprintf("kafka-%s-%d-%d", r.Topic, r.Partition, r.Offset)
		bad = append(bad, "no message ID header")
	}
	if env.Kind == 0 && len(bad) == 0 {
		bad = append(bad, "no message kind header")
	}
	env.Body, env.OrderingKey = r.Value, string(r.Key)
	if len(bad) > 0 {
		env.SetHeader(bus.HeaderDecodeError, "kafka: undecodable record: "+strings.Join(bad, "; "))
	}
	return env
}
