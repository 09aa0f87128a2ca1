package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one live connection with its publisher channels. A lost
// connection is never reused: run replaces the whole session.
type session struct {
	conn      *amqp.Connection
	opts      Options
	queueType string
	closes    chan *amqp.Error // the connection's close notification
	dead      chan struct{}    // closed by run once the session is replaced

	mu        sync.Mutex
	pubs      []*publisher  // opened lazily, reopened after a channel error
	unblocked chan struct{} // closed while the broker accepts publishes
	next      atomic.Uint64 // round-robin over pubs
}

func newSession(conn *amqp.Connection, opts Options) (*session, error) {
	s := &session{
		conn:      conn,
		opts:      opts,
		queueType: opts.QueueType,
		closes:    conn.NotifyClose(make(chan *amqp.Error, 1)),
		dead:      make(chan struct{}),
		pubs:      make([]*publisher, opts.PublisherChannels),
		unblocked: make(chan struct{}),
	}
	close(s.unblocked)
	if s.queueType == "" {
		s.queueType = QueueTypeQuorum
		if !serverAtLeast(conn.Properties, 3, 8) {
			s.queueType = QueueTypeClassic
		}
	}
	go s.watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
	// Declare the events exchange on every connection, so Publish never
	// hits a missing exchange (a channel error) even before Provision.
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: open channel: %w", err)
	}
	defer ch.Close()
	if err := declareExchange(ch, opts.EventsExchange); err != nil {
		return nil, err
	}
	return s, nil
}

// watchBlocked follows connection.blocked / unblocked, sent by the broker
// when a resource alarm (memory, disk) stops it from accepting publishes.
// Publishing then would block in a socket write that no context can
// interrupt, so publishers wait on s.unblocked instead.
func (s *session) watchBlocked(ch <-chan amqp.Blocking) {
	for b := range ch {
		s.mu.Lock()
		select {
		case <-s.unblocked:
			if b.Active {
				s.unblocked = make(chan struct{})
			}
		default:
			if !b.Active {
				close(s.unblocked)
			}
		}
		s.mu.Unlock()
	}
}

// waitUnblocked returns nil once the broker accepts publishes.
func (s *session) waitUnblocked(ctx context.Context) error {
	s.mu.Lock()
	unblocked := s.unblocked
	s.mu.Unlock()
	select {
	case <-unblocked:
		return nil
	case <-s.dead:
		return errConnectionLost
	case <-ctx.Done():
		return fmt.Errorf("rabbitmq: broker blocked publishing (resource alarm): %w", ctx.Err())
	}
}

// publisher returns an open publisher channel, round-robin.
func (s *session) publisher() (*publisher, error) {
	i := int(s.next.Add(1) % uint64(len(s.pubs)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pubs[i]; p != nil && !p.isGone() {
		return p, nil
	}
	p, err := newPublisher(s.conn, s.opts.MaxInFlight)
	if err != nil {
		return nil, err
	}
	s.pubs[i] = p
	return p, nil
}

// serverAtLeast reports whether the broker's advertised version is at least
// major.minor; an unknown version counts as recent.
func serverAtLeast(props amqp.Table, major, minor int) bool {
	v, _ := props["version"].(string)
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return true
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return true
	}
	return ma > major || ma == major && mi >= minor
}
