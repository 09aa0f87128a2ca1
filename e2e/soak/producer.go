package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/postbus/bus"
)

// message is the producer's record of one message: what it asked for and
// the earliest time the message may be handled.
type message struct {
	id    string
	seq   int
	delay time.Duration // 0: sent at once
	fail  string
	// due is the time read just before the first Send plus delay: a lower
	// bound of the due time the bus computes, so a handling before it is
	// early for certain.
	due  time.Time
	sent bool // a Send returned nil
	err  error
}

// Share of messages of each kind.
const (
	delayedShare   = 0.5  // sent with DeliverAfter(0–maxDelay)
	failOnceShare  = 0.10 // failOnce
	failLaterShare = 0.03 // failLater
	maxDelay       = 10 * time.Second
	sendAttempts   = 20 // a Send that fails is retried with the same ID
	senders        = 8
)

// planMessages draws n messages.
func planMessages(rng *rand.Rand, run string, n int) []*message {
	msgs := make([]*message, n)
	for i := range msgs {
		m := &message{id: fmt.Sprintf("%s-%06d", run, i), seq: i}
		if rng.Float64() < delayedShare {
			m.delay = time.Millisecond + time.Duration(rng.Int64N(int64(maxDelay)))
		}
		switch r := rng.Float64(); {
		case r < failOnceShare:
			m.fail = failOnce
		case r < failOnceShare+failLaterShare:
			m.fail = failLater
		}
		msgs[i] = m
	}
	return msgs
}

// produce sends msgs evenly over d with a few concurrent senders, retrying
// a failed Send with the same message ID. It returns how far behind
// schedule the last send was.
func produce(ctx context.Context, b *bus.Bus, msgs []*message, d time.Duration, log *slog.Logger) time.Duration {
	start := time.Now()
	work := make(chan *message)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for m := range work {
				send(ctx, b, m, log)
			}
		})
	}
	var lag time.Duration
	for i, m := range msgs {
		at := start.Add(d * time.Duration(i) / time.Duration(len(msgs)))
		sleepCtx(ctx, time.Until(at))
		if ctx.Err() != nil {
			break
		}
		select {
		case work <- m:
		case <-ctx.Done():
		}
		lag = max(0, time.Since(at))
	}
	close(work)
	wg.Wait()
	return lag
}

func send(ctx context.Context, b *bus.Bus, m *message, log *slog.Logger) {
	opts := []bus.Option{bus.WithMessageID(m.id)}
	if m.delay > 0 {
		opts = append(opts, bus.DeliverAfter(m.delay))
	}
	m.due = time.Now().Add(m.delay)
	for attempt := 1; attempt <= sendAttempts; attempt++ {
		m.err = b.Send(ctx, Work{Seq: m.seq, Fail: m.fail}, opts...)
		if m.err == nil {
			m.sent = true
			return
		}
		log.Warn("send failed; retrying with the same ID", slog.String("id", m.id), slog.Any("error", m.err))
		sleepCtx(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
	}
}
