package sqs

import (
	"crypto/sha256"
	"encoding/hex"
)

// Name limits of SQS queues and SNS topics (standard, not FIFO).
const (
	maxQueueName = 80
	maxTopicName = 256
	hashSuffix   = 11 // "-" and 10 hex digits of SHA-256
)

// validName reports whether every byte of s is allowed in SQS queue and SNS
// topic names: ASCII letters, digits, '-' and '_'.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !allowedByte(s[i]) {
			return false
		}
	}
	return true
}

func allowedByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// sanitize maps name to a valid name of at most limit bytes. A name that is
// already valid and short enough stays as it is. Any other gets every
// disallowed byte replaced by '_', is cut to leave room, and ends with '-'
// and the first 10 hex digits of the SHA-256 of the original name, so two
// names that differ only in a replaced byte or beyond the cut still map to
// different names.
func sanitize(name string, limit int) string {
	if name != "" && len(name) <= limit && validName(name) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !allowedByte(c) {
			b[i] = '_'
		}
	}
	if keep := limit - hashSuffix; len(b) > keep {
		b = b[:keep]
	}
	sum := sha256.Sum256([]byte(name))
	return string(b) + "-" + hex.EncodeToString(sum[:])[:hashSuffix-1]
}

// queueName is the SQS name of the bus queue q.
func (t *Transport) queueName(q string) string {
	return t.opts.NamePrefix + sanitize(q, maxQueueName-len(t.opts.NamePrefix))
}

// topicName is the SNS name of the topic of the message type typ.
func (t *Transport) topicName(typ string) string {
	return t.opts.NamePrefix + sanitize(typ, maxTopicName-len(t.opts.NamePrefix))
}
