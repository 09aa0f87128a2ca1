package nats

import (
	"context"
	"hash/fnv"
	"io"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// De-duplication. The stream drops a message whose Nats-Msg-Id it already
// stored within its duplicate window, and acknowledges it as if stored. The
// transport derives that ID from what makes a message the same message, and
// from nothing a sender stamps again when it retries:
//
//	<ID>@<subject>            a message sent by application code
//	<ID>@<subject>#<digest>   a copy the bus made again on purpose
//
// The digest covers, when present: DueAt; the delayed-retry count
// (bus.HeaderDelayedRetries); the time the message was moved to the error
// or dead-letter queue (bus.HeaderFailureTime, bus.HeaderDeadLetterTime); and
// the stored copy being handled when the send was made (stream, consumer
// and stream sequence of the delivery whose context the send carries).
//
// So a caller's retry of a failed Send (new SentAt, new expiry; a delayed
// Send retried after its due time keeps that DueAt and goes out at once), the
// dispatcher sending a row again after a failed hand-over, a handler retried
// on the same delivery, and a publish the connection loss left in doubt all
// collapse into one stored message. A delayed retry, a replay from the error
// queue (sent while handling the error queue's copy), a message Replay
// passes over and puts back, and a second move to the error queue are new
// messages. Body and user headers are not part of it: the ID names the
// message.
func msgID(subject string, env *bus.Envelope, origin string) string {
	id := values.Escape(env.ID) + "@" + subject
	parts := [...]string{
		driver.FormatTime(env.DueAt),
		env.Header(bus.HeaderDelayedRetries),
		env.Header(bus.HeaderFailureTime),
		env.Header(bus.HeaderDeadLetterTime),
		origin,
	}
	empty := true
	for _, p := range parts {
		empty = empty && p == ""
	}
	if empty {
		return id
	}
	d := fnv.New64a()
	for _, p := range parts {
		_, _ = io.WriteString(d, p)
		_, _ = d.Write([]byte{0})
	}
	return id + "#" + strconv.FormatUint(d.Sum64(), 16)
}

// deliveryKey is the context key under which Receive passes the delivered
// message to its handler.
type deliveryKey struct{}

// withDelivery returns ctx carrying msg, so sends made while handling it
// know which stored copy they answer to.
func withDelivery(ctx context.Context, msg jetstream.Msg) context.Context {
	return context.WithValue(ctx, deliveryKey{}, msg)
}

// originOf names the stored copy of the message being handled under ctx:
// stream, consumer and stream sequence. A redelivery of that copy has the
// same origin; another copy (a replayed one) has another. Outside a
// handler it is empty.
func originOf(ctx context.Context) string {
	msg, ok := ctx.Value(deliveryKey{}).(jetstream.Msg)
	if !ok {
		return ""
	}
	md, err := msg.Metadata()
	if err != nil {
		return ""
	}
	return md.Stream + "/" + md.Consumer + "/" + strconv.FormatUint(md.Sequence.Stream, 10)
}
