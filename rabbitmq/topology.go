package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
)

// maxShortString is the AMQP 0-9-1 limit on names, routing keys, header
// names and the short-string properties (message ID, type, ...).
const maxShortString = 255

// Provision declares what the topology needs, idempotently:
//   - the events exchange (Options.EventsExchange, durable topic);
//   - a durable queue named t.Queue and one per t.Queues entry, of
//     Options.QueueType;
//   - for each t.Events entry, a binding from the events exchange to
//     t.Queue with the event type name as the routing key.
//
// Bindings are only ever added: a type the endpoint no longer subscribes to
// stays bound until removed by hand.
//
// During an outage Provision waits for the connection until ctx ends. When
// the broker refuses the connection (wrong user name or password, a vhost
// that does not exist or that the user may not use) or a declaration (an
// existing queue of another type, missing permissions), Provision fails at
// once with a *PermanentError (errors.Is(err, ErrPermanent)) carrying the
// broker's reason: retrying cannot fix these. If the connection is lost
// while it runs (RabbitMQ 3.10 closes it with INTERNAL_ERROR when a quorum
// queue is declared while it is being deleted), it starts again on the next
// connection, a few times at most.
func (t *Transport) Provision(ctx context.Context, top bus.Topology) error {
	if err := checkTopology(top); err != nil {
		return err
	}
	const attempts = 5
	for i := 1; ; i++ {
		s, err := t.session(ctx)
		if err != nil {
			return fmt.Errorf("rabbitmq: provision: %w", err)
		}
		err = t.provision(ctx, s, top)
		if err == nil || ctx.Err() != nil || i == attempts || !s.conn.IsClosed() {
			return err
		}
		t.log.Warn("rabbitmq: connection lost during provision, retrying", logKeyErr, err, logKeyAttempt, i)
		select {
		case <-s.dead:
		case <-ctx.Done():
			return err
		}
	}
}

func (t *Transport) provision(ctx context.Context, s *session, top bus.Topology) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: provision: open channel: %w", err)
	}
	// The amqp calls below take no context: closing the channel aborts the
	// one in progress when ctx ends.
	stop := context.AfterFunc(ctx, func() { _ = ch.Close() })
	defer func() {
		if stop() {
			_ = ch.Close()
		}
	}()
	if err := declareExchange(ch, t.opts.EventsExchange); err != nil {
		return ctxOr(ctx, channelRefused(err))
	}
	args := queueArgs(s.queueType)
	queues := append([]string{top.Queue}, top.Queues...)
	for _, q := range queues {
		if q == "" {
			continue
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			return ctxOr(ctx, fmt.Errorf("rabbitmq: provision: declare queue %q (%s): %w%s", q, s.queueType, channelRefused(err), typeHint(err)))
		}
	}
	for _, ev := range top.Events {
		if err := ch.QueueBind(top.Queue, ev, t.opts.EventsExchange, false, nil); err != nil {
			return ctxOr(ctx, fmt.Errorf("rabbitmq: provision: bind queue %q to %q for %q: %w", top.Queue, t.opts.EventsExchange, ev, channelRefused(err)))
		}
	}
	return nil
}

func declareExchange(ch *amqp.Channel, name string) error {
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q (durable topic): %w", name, err)
	}
	return nil
}

func queueArgs(queueType string) amqp.Table {
	if queueType == QueueTypeQuorum {
		return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	}
	// A classic queue is declared without x-queue-type, so queues created
	// by older clients or by hand (which have none) still match.
	return nil
}

// typeHint explains the usual cause of a PRECONDITION_FAILED on declare.
func typeHint(err error) string {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return " (the queue probably exists with another type or other arguments; set Options.QueueType to match it, or delete the queue)"
	}
	return ""
}

// ctxOr prefers the context's error when ctx ended, since closing the
// channel is what made the call fail.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func checkTopology(top bus.Topology) error {
	if top.Queue != "" {
		if err := checkName("queue", top.Queue); err != nil {
			return err
		}
	} else if len(top.Events) > 0 {
		return &NameError{What: "queue", Reason: "the topology subscribes to events but names no queue"}
	}
	for _, q := range top.Queues {
		if err := checkName("queue", q); err != nil {
			return err
		}
	}
	for _, ev := range top.Events {
		if err := checkEventType(ev); err != nil {
			return err
		}
	}
	return nil
}

// checkName checks a queue or exchange name.
func checkName(what, name string) error {
	switch {
	case name == "":
		return &NameError{What: what, Name: name, Reason: "empty"}
	case len(name) > maxShortString:
		return &NameError{What: what, Name: name, Reason: fmt.Sprintf("%d bytes, the limit is %d", len(name), maxShortString)}
	case !utf8.ValidString(name):
		return &NameError{What: what, Name: name, Reason: "not valid UTF-8"}
	case strings.HasPrefix(name, "amq."):
		return &NameError{What: what, Name: name, Reason: `the "amq." prefix is reserved by RabbitMQ`}
	}
	return nil
}

// checkEventType checks that an event type can be a topic routing key that
// matches only itself: at most 255 bytes, and no dot-separated word that is
// exactly "*" or "#" (those are wildcards in a binding). Dots, slashes and
// brackets are fine: "github.com/acme/sales.OrderPlaced" binds exactly.
func checkEventType(typ string) error {
	switch {
	case typ == "":
		return &NameError{What: "event type", Name: typ, Reason: "empty"}
	case len(typ) > maxShortString:
		return &NameError{What: "event type", Name: typ, Reason: fmt.Sprintf("%d bytes, the routing key limit is %d", len(typ), maxShortString)}
	case !utf8.ValidString(typ):
		return &NameError{What: "event type", Name: typ, Reason: "not valid UTF-8"}
	}
	for w := range strings.SplitSeq(typ, ".") {
		if w == "*" || w == "#" {
			return &NameError{What: "event type", Name: typ, Reason: `a dot-separated word "*" or "#" would be a topic wildcard`}
		}
	}
	return nil
}
