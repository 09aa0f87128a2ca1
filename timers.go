package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/postbus/bus/internal/loop"
)

// Message timers, after MSMQ's: a message that is no longer worth handling
// is discarded, with a trail, instead of being handled late.
//
//	sent/due ──────────────► reach-queue-by ─────► expires-at
//	   │  TimeToReachQueue: must be handed        │
//	   │  to the transport by then (dispatcher)   │
//	   │  TimeToBeReceived: must reach a handler by then (receiver)
//
// Both clocks start at the due time of a delayed message, or at the send
// call for an immediate one. On the wire they are absolute UTC instants
// (Envelope.ExpiresAt and HeaderReachQueueBy), so every hop and every clock
// agrees. The smaller one wins: a message whose time to be received has
// passed is not dispatched either.

// Timer headers.
const (
	// HeaderReachQueueBy is the RFC 3339 UTC instant by which the message
	// must be handed to the transport (TimeToReachQueue).
	HeaderReachQueueBy = "postbus.timer.reach-queue-by"
	// HeaderTimeToBeReceived is the relative TimeToBeReceived, for
	// information; Envelope.ExpiresAt is the rule.
	HeaderTimeToBeReceived = "postbus.timer.time-to-be-received"
	// HeaderDeadLetterOnExpiry asks for the dead-letter queue on expiry.
	HeaderDeadLetterOnExpiry = "postbus.timer.dead-letter"
	// HeaderAckLevel and HeaderAckQueue carry an Acknowledge request.
	HeaderAckLevel = "postbus.ack.level"
	HeaderAckQueue = "postbus.ack.queue"
	// HeaderOriginalExpiresAt keeps, on a copy in the error or dead-letter
	// queue, the RFC 3339 expiry (Envelope.ExpiresAt) the message had.
	HeaderOriginalExpiresAt = "postbus.original.expires-at"
	// HeaderOriginalPrefix prefixes, on such a copy, the timer and
	// acknowledgement headers the message had (postbus.original.postbus.timer.…).
	HeaderOriginalPrefix = "postbus.original."
	// Headers of a dead-lettered message: which timer expired, where, when.
	HeaderDeadLetterTimer    = "postbus.deadletter.timer"
	HeaderDeadLetterEndpoint = "postbus.deadletter.endpoint"
	HeaderDeadLetterTime     = "postbus.deadletter.time"
)

// TimeToBeReceived discards the message if no handler received it within d
// of it being handed to the transport (for a delayed message: of its due
// time). d must be positive.
func TimeToBeReceived(d time.Duration) Option {
	return func(o *sendOptions) error {
		if d <= 0 {
			return &OptionError{Option: "TimeToBeReceived", Reason: fmt.Sprintf("must be positive, got %v", d)}
		}
		o.ttbr = d
		return nil
	}
}

// TimeToReachQueue discards the message if it cannot be handed to the
// transport within d of when it was meant to be sent (its due time, or the
// send call). It bounds how late the dispatcher may deliver after an outage.
// d must be positive.
func TimeToReachQueue(d time.Duration) Option {
	return func(o *sendOptions) error {
		if d <= 0 {
			return &OptionError{Option: "TimeToReachQueue", Reason: fmt.Sprintf("must be positive, got %v", d)}
		}
		o.ttrq = d
		return nil
	}
}

// DeadLetterOnExpiry moves the message to the receiving (or dispatching)
// endpoint's dead-letter queue (Config.DeadLetterQueue) if a timer expires.
func DeadLetterOnExpiry() Option {
	return func(o *sendOptions) error {
		o.headers = setKey(o.headers, HeaderDeadLetterOnExpiry, "true")
		return nil
	}
}

// AckLevel says which acknowledgements a sender wants.
type AckLevel uint8

// Acknowledgement levels; combine them with |.
const (
	// AckNegative: an acknowledgement when a timer discards the message.
	AckNegative AckLevel = 1 << iota
	// AckPositive: an acknowledgement when the message reaches its queue
	// and another when it was handled.
	AckPositive
	// AckFull is both.
	AckFull = AckNegative | AckPositive
)

// AckClass says what an Acknowledgement reports.
type AckClass string

// Acknowledgement classes.
const (
	AckReachQueueTimeout AckClass = "ReachQueueTimeout" // not handed to the transport in time
	AckReceiveTimeout    AckClass = "ReceiveTimeout"    // not received by a handler in time
	AckReachedQueue      AckClass = "ReachedQueue"      // arrived at the receiving endpoint
	AckReceived          AckClass = "Received"          // handled successfully
)

// Acknowledgement is the message sent to an administration queue about
// another message. Handle it like any message at the admin endpoint:
//
//	bus.Handle(admin, func(ctx context.Context, a bus.Acknowledgement) error { … })
type Acknowledgement struct {
	MessageID     string
	CorrelationID string
	MessageType   string
	Class         AckClass
	Endpoint      string    // where it happened
	Time          time.Time // when, UTC
}

// MessageName gives acknowledgements a fixed wire name.
func (Acknowledgement) MessageName() string { return "postbus.Acknowledgement" }

// Acknowledge asks for Acknowledgement messages at level to be sent to
// adminQueue.
func Acknowledge(level AckLevel, adminQueue string) Option {
	return func(o *sendOptions) error {
		if level == 0 || level&^AckFull != 0 {
			return &OptionError{Option: "Acknowledge", Reason: fmt.Sprintf("unknown level %d", level)}
		}
		if err := validateQueueName("adminQueue", adminQueue); err != nil {
			return &OptionError{Option: "Acknowledge", Reason: err.(*ConfigError).Reason}
		}
		o.headers = setKey(o.headers, HeaderAckLevel, strconv.Itoa(int(level)))
		o.headers = setKey(o.headers, HeaderAckQueue, adminQueue)
		return nil
	}
}

// applyTimers turns the relative timers into absolute UTC instants.
func applyTimers(env *Envelope, o *sendOptions) {
	if o.ttbr == 0 && o.ttrq == 0 {
		return
	}
	start := deliverableAt(env)
	if o.ttbr > 0 {
		env.ExpiresAt = start.Add(o.ttbr).UTC()
		env.SetHeader(HeaderTimeToBeReceived, o.ttbr.String())
	}
	if o.ttrq > 0 {
		env.SetHeader(HeaderReachQueueBy, start.Add(o.ttrq).UTC().Format(time.RFC3339Nano))
	}
}

// deliverableAt is when env could first be delivered: its due time, or
// when it was sent if that was later (a due time that had passed sends at
// once). Timers run, and lateness counts, from it.
func deliverableAt(env *Envelope) time.Time {
	if env.DueAt.After(env.SentAt) {
		return env.DueAt
	}
	return env.SentAt
}

// reachDeadline is when the message must be handed to the transport, and
// the class to report if it is not: the earlier of its time to reach queue
// and its time to be received.
func reachDeadline(env *Envelope) (time.Time, AckClass) {
	by, class := env.ExpiresAt, AckReceiveTimeout
	if s := env.Header(HeaderReachQueueBy); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil && (by.IsZero() || t.Before(by)) {
			by, class = t, AckReachQueueTimeout
		}
	}
	return by, class
}

// expired reports whether a timer has discarded env at now: before hand-over
// (reaching) or before a handler (receiving).
func expired(env *Envelope, now time.Time, reaching bool) (AckClass, bool) {
	if reaching {
		by, class := reachDeadline(env)
		return class, !by.IsZero() && now.After(by)
	}
	return AckReceiveTimeout, !env.ExpiresAt.IsZero() && now.After(env.ExpiresAt)
}

// discardExpired leaves the trail of an expired message: a log line, a
// counter, the dead-letter queue and a negative acknowledgement when asked
// for. It returns an error only if the dead-letter queue did not accept the
// message, so the message is kept to try again.
func (b *Bus) discardExpired(ctx context.Context, env *Envelope, class AckClass) error {
	now := b.clock.Now().UTC()
	timer := "time-to-be-received"
	if class == AckReachQueueTimeout {
		timer = "time-to-reach-queue"
	}
	if env.Header(HeaderDeadLetterOnExpiry) == "true" {
		dl := env.Clone()
		dl.SetHeader(HeaderDeadLetterTimer, timer)
		dl.SetHeader(HeaderDeadLetterEndpoint, b.cfg.Endpoint)
		dl.SetHeader(HeaderDeadLetterTime, now.Format(time.RFC3339Nano))
		sctx, cancel := loop.Detach(ctx, b.cfg.Dispatcher.SendTimeout)
		err := b.transport.Send(sctx, b.cfg.DeadLetterQueue, finalCopy(dl))
		cancel()
		if err != nil {
			return fmt.Errorf("bus: dead-letter %s: %w", env.ID, err)
		}
	}
	b.metrics.expired.Add(1)
	b.emit(ctx, ObserverEvent{Kind: EventExpired, Envelope: env, Reason: timer})
	b.log.Warn("message expired and was discarded", slog.String(logKeyMessageID, env.ID),
		slog.String(logKeyType, env.Type), slog.String("timer", timer))
	b.acknowledge(ctx, env, AckNegative, class)
	return nil
}

// acknowledge sends an Acknowledgement if the sender asked for this level.
// Acknowledgements are best effort: a failure is logged, never retried.
func (b *Bus) acknowledge(ctx context.Context, env *Envelope, level AckLevel, class AckClass) {
	queue := env.Header(HeaderAckQueue)
	if queue == "" {
		return
	}
	if want, _ := strconv.Atoi(env.Header(HeaderAckLevel)); AckLevel(want)&level == 0 {
		return
	}
	ack := Acknowledgement{MessageID: env.ID, CorrelationID: env.CorrelationID, MessageType: env.Type,
		Class: class, Endpoint: b.cfg.Endpoint, Time: b.clock.Now().UTC()}
	body, err := b.cfg.Serializer.Marshal(ack)
	if err == nil {
		now := b.clock.Now().UTC()
		out := &Envelope{ID: b.ids.New(), Type: ack.MessageName(), Kind: KindCommand, Body: body,
			ContentType: b.cfg.Serializer.ContentType(), CorrelationID: env.CorrelationID,
			Source: b.cfg.Endpoint, Destination: queue, SentAt: now}
		sctx, cancel := loop.Detach(ctx, b.cfg.Dispatcher.SendTimeout)
		err = b.transport.Send(sctx, queue, out)
		cancel()
	}
	if err != nil {
		b.log.Error("cannot send acknowledgement", slog.String(logKeyMessageID, env.ID),
			slog.String(logKeyQueue, queue), slog.Any(logKeyError, err))
	}
}

// finalCopy turns a copy bound for the error or dead-letter queue into one
// that no timer or acknowledgement request applies to any more: a message
// there stays until someone acts on it, and an endpoint consuming that queue
// never expires it, dead-letters it or acknowledges it again (nor does a
// broker expire it). The original timers and requests stay readable in
// headers under HeaderOriginalPrefix and HeaderOriginalExpiresAt.
func finalCopy(env *Envelope) *Envelope {
	if !env.ExpiresAt.IsZero() {
		env.SetHeader(HeaderOriginalExpiresAt, env.ExpiresAt.UTC().Format(time.RFC3339Nano))
		env.ExpiresAt = time.Time{}
	}
	for _, k := range []string{HeaderReachQueueBy, HeaderTimeToBeReceived, HeaderDeadLetterOnExpiry, HeaderAckLevel, HeaderAckQueue} {
		if v, ok := env.Headers[k]; ok {
			delete(env.Headers, k)
			env.SetHeader(HeaderOriginalPrefix+k, v)
		}
	}
	return env
}
