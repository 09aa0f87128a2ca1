package kafka

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Names on the brokers. A Kafka topic name may hold only ASCII letters,
// digits, '.', '_' and '-', at most 249 of them. Queue and message type
// names are written with a reversible escape that keeps common characters
// readable:
//
//   - ASCII letters, digits and '-' stand for themselves;
//   - '_' is written "__";
//   - every other byte is written '_' followed by two upper-case hex digits.
//
// "github.com/acme/sales.OrderPlaced" becomes
// "github_2Ecom_2Facme_2Fsales_2EOrderPlaced". A name too long for a topic
// keeps its start and ends with a hash of the whole name.

const maxTopicName = 249

func escapeName(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c):
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		default:
			b.WriteByte('_')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String()
}

const hexDigits = "0123456789ABCDEF"

func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// topicName joins the prefix, a kind ("q" or "e") and the escaped name,
// shortened with a hash suffix when too long.
func (t *Transport) topicName(kind, name string) string {
	head := t.opts.TopicPrefix + "." + kind + "."
	esc := escapeName(name)
	if len(head)+len(esc) <= maxTopicName {
		return head + esc
	}
	sum := sha256.Sum256([]byte(name))
	return head + esc[:maxTopicName-len(head)-17] + "-" + hex.EncodeToString(sum[:8])
}

// queueTopic is the topic commands and replies to queue are produced to.
func (t *Transport) queueTopic(queue string) string { return t.topicName("q", queue) }

// eventTopic is the topic events of type typ are produced to.
func (t *Transport) eventTopic(typ string) string { return t.topicName("e", typ) }

// groupName is the consumer group of queue: every process receiving the
// queue joins it.
func (t *Transport) groupName(queue string) string {
	return t.opts.TopicPrefix + ".g." + escapeName(queue)
}
