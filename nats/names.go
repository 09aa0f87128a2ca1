package nats

import (
	"strings"

	"github.com/postbus/bus/driver"
)

// Names on the server. A queue name or a message type name may hold any
// character, but a NATS subject token may not contain '.', '*', '>' or
// whitespace, and a consumer name may not contain '/' or '\' either. Both are
// therefore written with the reversible driver.Token escape, which keeps the
// common characters readable: "github.com/acme/sales.OrderPlaced" becomes
// "github_2Ecom_2Facme_2Fsales_2EOrderPlaced".

// Consumer name bounds: the server keeps one directory per consumer, and
// file systems limit a name to 255 bytes. An event consumer name is a queue
// part, "_G" and a type part.
const (
	maxConsumerName = 128
	maxTypeName     = 96
)

// token is the escape of subject tokens and consumer names.
var token driver.Token

// consumerName is the durable consumer name of a queue: its escaped name,
// shortened with a hash suffix when it is too long.
func consumerName(queue string) string {
	return driver.Fit(token.Escape(queue), queue, maxConsumerName, hashLen)
}

// hashLen is the length of the hash suffix of a name too long to keep whole.
const hashLen = 16

// eventConsumerName is the durable consumer name through which queue
// receives events of type typ: the queue's consumer name, "_G", and the
// escaped type (shortened with a hash suffix when too long). The escape
// never produces "_G", so the queue part is unambiguous.
func eventConsumerName(queue, typ string) string {
	return eventConsumerPrefix(queue) + driver.Fit(token.Escape(typ), typ, maxTypeName, hashLen)
}

// eventConsumerPrefix starts the names of every event consumer of queue.
func eventConsumerPrefix(queue string) string { return consumerName(queue) + "_G" }

// queueSubject is the subject commands to queue are published on.
func (t *Transport) queueSubject(queue string) string {
	return t.opts.SubjectPrefix + ".q." + token.Escape(queue)
}

// eventSubject is the subject events of type typ are published on.
func (t *Transport) eventSubject(typ string) string {
	return t.opts.SubjectPrefix + ".e." + token.Escape(typ)
}

// validStreamName reports whether s is a valid stream name.
func validStreamName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*>/\\ \t\r\n") && printable(s)
}

// validSubjectPrefix reports whether s is one or more dot-separated literal
// subject tokens.
func validSubjectPrefix(s string) bool {
	if s == "" || strings.HasPrefix(s, "$") || strings.ContainsAny(s, "*> \t\r\n") || !printable(s) {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] == 0x7f {
			return false
		}
	}
	return true
}
