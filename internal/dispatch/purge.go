package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/postbus/bus/backend"
	"github.com/postbus/bus/internal/loop"
)

// The inbox purge: with the transactional outbox on, the inbox rows that
// recognise a redelivered message as a duplicate are kept for the outbox's
// retention, then deleted in batches. It runs beside the dispatcher, on
// every receiving bus that dispatches, and has nothing else in common
// with it.

const (
	// inboxPurgeInterval is how often the purge deletes inbox rows older
	// than the retention.
	inboxPurgeInterval = time.Minute
	// inboxPurgeBatch is how many rows one delete takes at most.
	inboxPurgeBatch = 1000
)

// InboxPurge deletes the expired inbox rows of an OutboxStore.
type InboxPurge struct {
	store     backend.OutboxStore
	retention time.Duration
	clock     backend.Clock
	log       *slog.Logger
	limiter   *loop.RateLimiter
}

// NewInboxPurge returns a purge of store's inbox rows older than
// retention, timed on clock, logging its failures to log.
func NewInboxPurge(store backend.OutboxStore, retention time.Duration, clock backend.Clock, log *slog.Logger) *InboxPurge {
	return &InboxPurge{store: store, retention: retention, clock: clock,
		log: log.With(slog.String("component", "dispatcher")), limiter: loop.NewRateLimiter(loop.LogInterval)}
}

// Run purges at once and then every inboxPurgeInterval until ctx ends.
func (p *InboxPurge) Run(ctx context.Context) {
	for ctx.Err() == nil {
		p.purge(ctx)
		loop.Sleep(ctx, p.clock, inboxPurgeInterval)
	}
}

// purge deletes expired inbox rows in batches until none is left.
func (p *InboxPurge) purge(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := p.store.PurgeInbox(ctx, p.retention, inboxPurgeBatch)
		if err != nil {
			if ctx.Err() == nil && p.limiter.Allow("inbox", p.clock.Now()) {
				p.log.Error("cannot delete expired inbox rows", slog.String("failure", "inbox"), slog.Any(logKeyError, err))
			}
			return
		}
		if n < inboxPurgeBatch {
			return
		}
	}
}
