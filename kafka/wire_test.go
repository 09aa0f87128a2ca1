package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/postbus/bus"
)

func TestRecordRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	want := &bus.Envelope{
		ID: "id-1", Type: "acme.Ordered", Kind: bus.KindReply, Body: []byte("body\x00bytes"),
		ContentType: "application/json", CorrelationID: "corr 1", Source: "orders", Destination: "billing",
		Headers:          map[string]string{"empty": "", "h:colon": "a:b", "unicode": "ñandú"},
		Attributes:       map[string]string{"tenant": "acme"},
		StickyAttributes: map[string]string{"trace": "t\t1"},
		SentAt:           time.Date(2031, 3, 4, 5, 6, 7, 891011121, time.UTC),
		DueAt:            time.Date(2031, 3, 4, 5, 6, 9, 1, time.UTC),
		ExpiresAt:        time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC),
		OrderingKey:      "key-7",
	}
	r := encodeRecord("topic", want)
	got := decodeRecord(r)
	if got.Header(bus.HeaderDecodeError) != "" {
		t.Fatalf("decode error: %s", got.Header(bus.HeaderDecodeError))
	}
	if got.ID != want.ID || got.Type != want.Type || got.Kind != want.Kind || string(got.Body) != string(want.Body) ||
		got.ContentType != want.ContentType || got.CorrelationID != want.CorrelationID || got.Source != want.Source ||
		got.Destination != want.Destination || got.OrderingKey != want.OrderingKey ||
		!got.SentAt.Equal(want.SentAt) || !got.DueAt.Equal(want.DueAt) || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, m := range []struct{ got, want map[string]string }{
		{got.Headers, want.Headers}, {got.Attributes, want.Attributes}, {got.StickyAttributes, want.StickyAttributes},
	} {
		if len(m.got) != len(m.want) {
			t.Errorf("map %v, want %v", m.got, m.want)
		}
		for k, v := range m.want {
			if gv, ok := m.got[k]; !ok || gv != v {
				t.Errorf("key %q = %q, %v; want %q", k, gv, ok, v)
			}
		}
	}
}

func TestForeignRecordIsMarkedUndecodable(t *testing.T) {
	t.Parallel()
	env := decodeRecord(&kgo.Record{Topic: "t", Partition: 2, Offset: 9, Value: []byte("x"),
		Headers: []kgo.RecordHeader{{Key: hSentAt, Value: []byte("yesterday")}}})
	if env.Header(bus.HeaderDecodeError) == "" || env.ID != "kafka-t-2-9" || string(env.Body) != "x" {
		t.Errorf("decoded %+v", env)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add("k", "postbus-kind", "2", []byte("body"))
	f.Add("", "postbus-due-at", "2031-03-04T05:06:07Z", []byte{})
	f.Add("x", "h:", "", []byte(nil))
	f.Fuzz(func(t *testing.T, key, hk, hv string, body []byte) {
		env := decodeRecord(&kgo.Record{Key: []byte(key), Value: body,
			Headers: []kgo.RecordHeader{{Key: hID, Value: []byte("id")}, {Key: hType, Value: []byte("T")},
				{Key: hKind, Value: []byte("1")}, {Key: hk, Value: []byte(hv)}}})
		if env.ID == "" {
			t.Fatal("no ID")
		}
		if env.Header(bus.HeaderDecodeError) != "" {
			return
		}
		again := decodeRecord(encodeRecord("t", env))
		if again.ID != env.ID || again.Type != env.Type || again.Kind != env.Kind || again.OrderingKey != env.OrderingKey ||
			string(again.Body) != string(env.Body) || len(again.Headers) != len(env.Headers) {
			t.Fatalf("re-encoded %+v as %+v", env, again)
		}
	})
}

func TestOptionsAndNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		seeds []string
		opts  Options
	}{
		{"no seeds", nil, Options{}},
		{"empty seed", []string{""}, Options{}},
		{"bad prefix", []string{"127.0.0.1:9092"}, Options{TopicPrefix: "a b"}},
		{"internal prefix", []string{"127.0.0.1:9092"}, Options{TopicPrefix: "__consumer"}},
		{"negative interval", []string{"127.0.0.1:9092"}, Options{CommitInterval: -1}},
	} {
		if _, err := New(c.seeds, c.opts); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		}
	}
	tr, err := New([]string{"127.0.0.1:9092"}, Options{TopicPrefix: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(t.Context())
	if got := tr.eventTopic("github.com/acme/sales.OrderPlaced"); got != "shop.e.github_2Ecom_2Facme_2Fsales_2EOrderPlaced" {
		t.Errorf("event topic %q", got)
	}
	long := tr.queueTopic(string(make([]byte, 400)))
	if len(long) > maxTopicName {
		t.Errorf("topic of %d bytes", len(long))
	}
	if tr.Identity() != "kafka:shop" {
		t.Errorf("identity %q", tr.Identity())
	}
}
