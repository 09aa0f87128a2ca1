package sqs

import "github.com/postbus/bus/driver"

// Name limits of SQS queues and SNS topics (standard, not FIFO).
const (
	maxQueueName = 80
	maxTopicName = 256
	hashLen      = 10 // hex digits of SHA-256 after the '-' of a sanitised name
)

// validName reports whether every byte of s is allowed in SQS queue and SNS
// topic names: ASCII letters, digits, '-' and '_'.
func validName(s string) bool { return driver.Valid(s, allowedByte) }

func allowedByte(c byte) bool { return driver.TokenByte(c) || c == '_' }

// sanitize maps name to a valid name of at most limit bytes (see
// driver.Sanitize): a valid name short enough stays as it is; any other
// gets '_' for each disallowed byte, is cut, and ends with '-' and 10 hex
// digits of the SHA-256 of the original name.
func sanitize(name string, limit int) string {
	return driver.Sanitize(name, allowedByte, limit, hashLen)
}

// queueName is the SQS name of the bus queue q.
func (t *Transport) queueName(q string) string {
	return t.opts.NamePrefix + sanitize(q, maxQueueName-len(t.opts.NamePrefix))
}

// topicName is the SNS name of the topic of the message type typ.
func (t *Transport) topicName(typ string) string {
	return t.opts.NamePrefix + sanitize(typ, maxTopicName-len(t.opts.NamePrefix))
}
