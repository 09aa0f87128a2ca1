package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
	_ bus.Pinger            = (*Transport)(nil)
)

// Transport is a bus.Transport on RabbitMQ. It owns one AMQP connection,
// reconnects with backoff when it is lost, and is safe for concurrent use.
// Create it with New and release it with Close.
type Transport struct {
	url  string
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	sess    *session        // the live session; nil while disconnected
	refused *PermanentError // set while the broker refuses the connection
	ready   chan struct{}   // closed while sess or refused is set (setStateLocked)
	lastErr error           // why the last dial failed or the last connection was lost
	closed  bool

	stop chan struct{} // closed by Close
	done chan struct{} // closed when the connection loop has exited
}

// New returns a Transport for the broker at url, an AMQP URI such as
// "amqp://guest:guest@127.0.0.1:5672/" (the path names the vhost). It checks
// url and opts and starts connecting in the background; it does not wait
// for the connection. Calls that need the broker wait for it, up to their
// context's end.
func New(url string, opts Options) (*Transport, error) {
	if _, err := amqp.ParseURI(url); err != nil {
		return nil, &OptionsError{Field: "URL", Reason: driver.RedactError(err, url).Error()}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t := &Transport{
		url:   url,
		opts:  opts,
		log:   opts.Logger.With(logKeyName, opts.ConnectionName),
		ready: make(chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go t.run()
	return t, nil
}

// Identity names the vhost and events exchange: "rabbitmq:<vhost>#<exchange>".
// Scheduled rows carry it, so a dispatcher only sends rows scheduled
// through the same vhost and exchange. It leaves out the host, which
// differs between processes that reach one broker or cluster under
// different names; two separate brokers whose services share one database
// need different vhosts or EventsExchange names.
func (t *Transport) Identity() string {
	vhost := "/"
	if u, err := amqp.ParseURI(t.url); err == nil {
		vhost = u.Vhost
	}
	return "rabbitmq:" + vhost + "#" + t.opts.EventsExchange
}

// Ping checks that the transport holds a live connection to the broker
// (bus.Pinger, for Bus.Health), waiting for a reconnection within ctx;
// the broker's heartbeats tell a dead connection.
func (t *Transport) Ping(ctx context.Context) error {
	_, err := t.session(ctx)
	return err
}

// Close closes the connection and stops reconnecting. Sends waiting for a
// confirm fail (their messages may or may not have been accepted); Receive
// calls still running return ErrClosed, and their unacknowledged messages
// go back to their queues. Close waits for the background work to end, or
// for ctx. Calling it again returns nil.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.stop)
	}
	t.mu.Unlock()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: close: %w", ctx.Err())
	}
}

// logInterval rate-limits repeated connection-failure logs during an outage.
const logInterval = 10 * time.Second

// run keeps a connection open until Close.
func (t *Transport) run() {
	defer close(t.done)
	delay := t.opts.ReconnectMin
	recovering := false    // a dial failed or a connection was lost
	var lastWarn time.Time // connect failures are logged once per logInterval
	maybe := 0             // attempts in a row that ended in maybeRefused
	for attempt := 1; ; attempt++ {
		s, kind, err := t.connect()
		if err != nil {
			t.report(err)
			recovering = true
			wait := delay/2 + rand.N(delay/2+1)
			if kind == maybeRefused {
				maybe++
			} else {
				maybe = 0
			}
			switch {
			case kind == refused || maybe >= 2:
				t.refuse(err, attempt)
			case kind == maybeRefused:
				t.setLastErr(err)
				wait = 0 // confirm it at once: a failed login already took the broker seconds
			default:
				t.mu.Lock()
				t.lastErr = err
				t.setStateLocked(nil, nil) // calls wait again, if the broker had refused
				t.mu.Unlock()
				if time.Since(lastWarn) >= logInterval {
					lastWarn = time.Now()
					t.log.Warn("rabbitmq: connect failed; retrying", logKeyErr, err, logKeyAttempt, attempt, logKeyDelay, wait)
				}
			}
			select {
			case <-time.After(wait):
			case <-t.stop:
				return
			}
			delay = min(delay*2, t.opts.ReconnectMax)
			continue
		}
		if recovering {
			t.log.Info("rabbitmq: connected", logKeyAttempt, attempt)
		}
		attempt, recovering, maybe = 0, true, 0
		connectedAt := time.Now()
		t.mu.Lock()
		t.setStateLocked(s, nil)
		t.mu.Unlock()

		var lost error
		select {
		case amqpErr, ok := <-s.closes:
			lost = errors.New("connection closed")
			if ok && amqpErr != nil {
				lost = amqpErr
			}
		case <-t.stop:
		}
		t.mu.Lock()
		t.setStateLocked(nil, nil)
		if lost != nil {
			t.lastErr = fmt.Errorf("rabbitmq: connection lost: %w", lost)
		}
		t.mu.Unlock()
		close(s.dead)
		if lost == nil { // Close
			_ = s.conn.CloseDeadline(time.Now().Add(t.opts.DialTimeout))
			return
		}
		t.report(fmt.Errorf("rabbitmq: connection lost: %w", lost))
		// Pause before redialing, and keep backing off while connections
		// keep dying young, so a flapping broker is not hammered.
		if time.Since(connectedAt) > 10*t.opts.ReconnectMax {
			delay = t.opts.ReconnectMin
		}
		wait := delay/2 + rand.N(delay/2+1)
		t.log.Warn("rabbitmq: connection lost, reconnecting", logKeyErr, lost, logKeyDelay, wait)
		select {
		case <-time.After(wait):
		case <-t.stop:
			return
		}
		delay = min(delay*2, t.opts.ReconnectMax)
	}
}

// refuse records that the broker refuses the connection: calls that need
// it fail at once with the *PermanentError until an attempt succeeds (an
// administrator may create the vhost or restore the password meanwhile).
func (t *Transport) refuse(err error, attempt int) {
	perm := refusedError(t.url, err)
	t.mu.Lock()
	first := t.refused == nil
	t.lastErr = perm
	t.setStateLocked(nil, perm)
	t.mu.Unlock()
	if first {
		t.log.Error("rabbitmq: the broker refused the connection; calls fail until it accepts one",
			logKeyErr, perm, logKeyAttempt, attempt)
	}
}

// setStateLocked sets the session and the refusal (at most one of them),
// keeping t.ready closed exactly while one is set, so session never waits
// when it has an answer and never spins when it has none.
func (t *Transport) setStateLocked(s *session, perm *PermanentError) {
	had := t.sess != nil || t.refused != nil
	t.sess, t.refused = s, perm
	switch has := s != nil || perm != nil; {
	case has && !had:
		close(t.ready)
	case !has && had:
		t.ready = make(chan struct{})
	}
}

// connect dials the broker and sets up a session. On failure it says
// whether the broker refused the connection.
func (t *Transport) connect() (*session, refusal, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(t.opts.ConnectionName)
	conn, err := amqp.DialConfig(t.url, amqp.Config{
		Heartbeat:  t.opts.Heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial:       amqp.DefaultDial(t.opts.DialTimeout),
	})
	if err != nil {
		return nil, classifyDial(err), fmt.Errorf("rabbitmq: dial: %w", err)
	}
	s, err := newSession(conn, t.opts)
	if err != nil {
		_ = conn.Close()
		if err = channelRefused(err); errors.Is(err, ErrPermanent) {
			return nil, refused, err
		}
		return nil, notRefused, err
	}
	return s, notRefused, nil
}

// session returns the live session, waiting for one until ctx ends. While
// the broker refuses the connection it returns the *PermanentError at once.
func (t *Transport) session(ctx context.Context) (*session, error) {
	for {
		t.mu.Lock()
		s, perm, ready, closed := t.sess, t.refused, t.ready, t.closed
		t.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if perm != nil {
			return nil, perm
		}
		if s != nil {
			if !s.conn.IsClosed() {
				return s, nil
			}
			ready = s.dead // lost, and run has not noticed yet
		}
		select {
		case <-ready:
		case <-t.stop:
			return nil, ErrClosed
		case <-ctx.Done():
			t.mu.Lock()
			lastErr := t.lastErr
			t.mu.Unlock()
			return nil, &NotConnectedError{Err: ctx.Err(), LastErr: lastErr}
		}
	}
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (t *Transport) setLastErr(err error) {
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
}

func (t *Transport) report(err error) {
	if t.opts.OnError != nil {
		t.opts.OnError(err)
	}
}
