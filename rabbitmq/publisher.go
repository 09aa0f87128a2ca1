package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
)

// errConnectionLost marks a publish whose channel went away before the
// broker confirmed it: the outcome is unknown, and the caller retries on
// the next connection.
var errConnectionLost = errors.New("rabbitmq: connection lost before the broker confirmed")

// publisher is one AMQP channel in confirm mode, shared by concurrent
// senders. Publishes are pipelined: each registers its delivery tag and
// writes the message (write), then waits for its own confirm (wait), while
// others publish; publishAll writes a whole batch before waiting.
//
// Correlation. A single goroutine (run) reads the channel's confirms and
// returns. The broker sends basic.return for an unroutable mandatory message
// before the basic.ack for it, and the client reads both in order on one
// reader goroutine, so when run takes a confirm from its channel the return
// for that message is already buffered in the returns channel. run drains
// returns before settling each confirm; a return marks the oldest in-flight
// publish with the same exchange, routing key and message ID.
type publisher struct {
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	closes   chan *amqp.Error
	slots    chan struct{} // bounds the unconfirmed publishes
	lock     chan struct{} // serializes tag assignment and write; a channel so waiting honours ctx
	gone     chan struct{} // closed when the channel has closed and every waiter was told

	mu      sync.Mutex
	pending map[uint64]*pendingPublish
	closed  bool
	err     error // why the channel closed
}

type pendingPublish struct {
	exchange, key, id string
	size              int // body bytes
	returned          *amqp.Return
	result            chan error // buffered: run never blocks
}

func newPublisher(conn *amqp.Connection, maxInFlight int) (*publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: enable publisher confirms: %w", err)
	}
	// The buffers hold every outstanding notification (slots bound them),
	// so the client's reader never waits on us.
	p := &publisher{
		ch:       ch,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, maxInFlight+1)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, maxInFlight+1)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		slots:    make(chan struct{}, maxInFlight),
		lock:     make(chan struct{}, 1),
		gone:     make(chan struct{}),
		pending:  make(map[uint64]*pendingPublish),
	}
	go p.run()
	return p, nil
}

func (p *publisher) isGone() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// publishAll writes every message of batch, as fast as the in-flight bound
// allows, then waits for each one's confirm and stores its result in
// batch[i].err. A message that could not be written gets the write's error
// and does not hold up the others.
func (p *publisher) publishAll(ctx context.Context, batch []*outgoing) {
	written := make([]*pendingPublish, len(batch))
	for i, o := range batch {
		written[i], o.err = p.write(ctx, o.exchange, o.key, o.mandatory, o.msg)
	}
	for i, pp := range written {
		if pp != nil {
			batch[i].err = pp.wait(ctx)
		}
	}
}

// write takes an in-flight slot, registers msg under its delivery tag and
// writes it; run settles the returned publish with the broker's confirm.
func (p *publisher) write(ctx context.Context, exchange, key string, mandatory bool, msg amqp.Publishing) (*pendingPublish, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a batch stops writing once its ctx ended
	}
	select {
	case p.slots <- struct{}{}:
	case <-p.gone:
		return nil, p.goneErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	pp := &pendingPublish{exchange: exchange, key: key, id: msg.MessageId, size: len(msg.Body), result: make(chan error, 1)}
	select {
	case p.lock <- struct{}{}:
	case <-p.gone:
		<-p.slots
		return nil, p.goneErr()
	case <-ctx.Done():
		<-p.slots
		return nil, ctx.Err()
	}
	tag := p.ch.GetNextPublishSeqNo()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.lock
		<-p.slots
		return nil, p.goneErr()
	}
	p.pending[tag] = pp
	p.mu.Unlock()
	err := p.ch.PublishWithContext(ctx, exchange, key, mandatory, false, msg)
	if err != nil {
		p.mu.Lock()
		_, still := p.pending[tag]
		delete(p.pending, tag)
		p.mu.Unlock()
		<-p.lock
		if still { // run did not settle it, so the slot is ours to free
			<-p.slots
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, p.classify(err)
	}
	<-p.lock
	return pp, nil
}

// wait returns the broker's answer for pp, or an error when ctx ends first.
func (pp *pendingPublish) wait(ctx context.Context) error {
	select {
	case err := <-pp.result:
		return err
	case <-ctx.Done():
		// The confirm may still come; run settles the slot then.
		return fmt.Errorf("waiting for the broker's confirm: %w", ctx.Err())
	}
}

func (p *publisher) run() {
	returns := p.returns
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.markReturned(r)
		case c, ok := <-p.confirms:
			if !ok {
				p.shutdown()
				return
			}
			returns = p.drainReturns(returns)
			p.settle(c)
		}
	}
}

func (p *publisher) drainReturns(returns chan amqp.Return) chan amqp.Return {
	for returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				return nil
			}
			p.markReturned(r)
		default:
			return returns
		}
	}
	return nil
}

func (p *publisher) markReturned(r amqp.Return) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var oldest uint64
	for tag, pp := range p.pending {
		if pp.returned == nil && pp.exchange == r.Exchange && pp.key == r.RoutingKey && pp.id == r.MessageId &&
			(oldest == 0 || tag < oldest) {
			oldest = tag
		}
	}
	if oldest != 0 {
		p.pending[oldest].returned = &r
	}
}

func (p *publisher) settle(c amqp.Confirmation) {
	p.mu.Lock()
	pp := p.pending[c.DeliveryTag]
	delete(p.pending, c.DeliveryTag)
	p.mu.Unlock()
	if pp == nil {
		return // its publish failed and was withdrawn
	}
	<-p.slots
	switch {
	case !c.Ack:
		pp.result <- ErrNacked
	case pp.returned != nil:
		// The queue does not exist: sending again cannot help (bus.ErrPermanent).
		pp.result <- bus.Permanent(fmt.Errorf("%w: %s (%d)", ErrUnroutable, pp.returned.ReplyText, pp.returned.ReplyCode))
	default:
		pp.result <- nil
	}
}

// shutdown fails every unconfirmed publish once the channel has closed.
// A message larger than the broker's max_message_size makes the broker
// close the channel; every unconfirmed message on it fails, but only those
// over the size named in the reason fail permanently.
func (p *publisher) shutdown() {
	var cause error = errConnectionLost
	maxSize := 0
	select {
	case e, ok := <-p.closes:
		if ok && e != nil && isChannelLevel(e) {
			cause = fmt.Errorf("rabbitmq: channel closed by the broker: %w", e)
			maxSize = maxMessageSize(e)
		}
	default:
	}
	p.mu.Lock()
	p.closed, p.err = true, cause
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for range pending {
		<-p.slots
	}
	for _, pp := range pending {
		if maxSize > 0 && pp.size > maxSize {
			pp.result <- bus.Permanent(fmt.Errorf("%w: %w", ErrTooLarge, cause))
			continue
		}
		pp.result <- cause
	}
	close(p.gone)
}

// tooLargeReason is how RabbitMQ (3.8 and later) names a message over its
// max_message_size when it closes the channel.
var tooLargeReason = regexp.MustCompile(`larger than configured max size (\d+)`)

// maxMessageSize returns the broker's max_message_size when e is its
// refusal of a message over it, and 0 otherwise.
func maxMessageSize(e *amqp.Error) int {
	if e.Code != amqp.PreconditionFailed && e.Code != amqp.ContentTooLarge {
		return 0
	}
	m := tooLargeReason.FindStringSubmatch(e.Reason)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func (p *publisher) goneErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	return errConnectionLost
}

// classify turns a failed write into errConnectionLost unless the broker
// refused what was sent (a channel-level error): a network error on write
// means the client is already shutting the connection down.
func (p *publisher) classify(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && isChannelLevel(ae) {
		return fmt.Errorf("rabbitmq: publish: %w", err)
	}
	return fmt.Errorf("%w: %w", errConnectionLost, err)
}

// isChannelLevel reports whether the broker closed the channel because of
// what was sent on it (AMQP soft errors such as 404 NOT_FOUND or 406
// PRECONDITION_FAILED), as opposed to the connection going away.
func isChannelLevel(e *amqp.Error) bool {
	switch e.Code {
	case amqp.ContentTooLarge, amqp.NoRoute, amqp.NoConsumers, amqp.AccessRefused,
		amqp.NotFound, amqp.ResourceLocked, amqp.PreconditionFailed:
		return e.Server
	}
	return false
}
