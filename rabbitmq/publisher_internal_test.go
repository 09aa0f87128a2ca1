package rabbitmq

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMaxMessageSizeFromTheBrokersRefusal: the broker's limit is read from
// its channel-close reason for a message over max_message_size (the
// broker on the test machine allows more than a test should send), so
// only messages over it fail permanently.
func TestMaxMessageSizeFromTheBrokersRefusal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  *amqp.Error
		want int
	}{
		{&amqp.Error{Code: amqp.PreconditionFailed, Server: true,
			Reason: "PRECONDITION_FAILED - message size 16777217 is larger than configured max size 16777216"}, 16777216},
		{&amqp.Error{Code: amqp.PreconditionFailed, Server: true, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"}, 0},
		{&amqp.Error{Code: amqp.NotFound, Server: true, Reason: "NOT_FOUND - larger than configured max size 5"}, 0},
	}
	for _, c := range cases {
		if got := maxMessageSize(c.err); got != c.want {
			t.Errorf("maxMessageSize(%q) = %d, want %d", c.err.Reason, got, c.want)
		}
	}
}
