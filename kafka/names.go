package kafka

import "github.com/postbus/bus/driver"

// Names on the brokers. A Kafka topic name may hold only ASCII letters,
// digits, '.', '_' and '-', at most 249 of them. Queue and message type
// names are written with the reversible driver.Token escape, which keeps
// common characters readable: "github.com/acme/sales.OrderPlaced" becomes
// "github_2Ecom_2Facme_2Fsales_2EOrderPlaced". A name too long for a topic
// keeps its start and ends with '-' and 16 hex digits of a hash of the
// whole name (driver.Fit).

const maxTopicName = 249

// token is the escape of queue and message type names.
var token driver.Token

// topicName joins the prefix, a kind ("q" or "e") and the escaped name,
// shortened with a hash suffix when too long.
func (t *Transport) topicName(kind, name string) string {
	head := t.opts.TopicPrefix + "." + kind + "."
	return head + driver.Fit(token.Escape(name), name, maxTopicName-len(head), 16)
}

// queueTopic is the topic commands and replies to queue are produced to.
func (t *Transport) queueTopic(queue string) string { return t.topicName("q", queue) }

// eventTopic is the topic events of type typ are produced to.
func (t *Transport) eventTopic(typ string) string { return t.topicName("e", typ) }

// groupName is the consumer group of queue: every process receiving the
// queue joins it.
func (t *Transport) groupName(queue string) string {
	return t.opts.TopicPrefix + ".g." + token.Escape(queue)
}
