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
	sent bool  // a Send returned nil
	err  error // the last Send's error
	// failures are the Sends that failed before the one that succeeded (or
	// the producer gave up), each retried with the same ID: a failed Send
	// whose write reached the broker leaves a copy.
	failures []sendFailure
}

// sendFailure is a failed Send: when it started and its error.
type sendFailure struct {
	at  time.Time
	err error
}

// retries is how often a Send of m failed and was retried.
func (m *message) retries() int { return len(m.failures) }

// handOversNeeded is how many times a dispatcher must hand m to the
// transport: once if it was delayed, once more for its delayed retry.
func (m *message) handOversNeeded() int {
	n := 0
	if m.delay > 0 {
		n++
	}
	if m.fail == failLater {
		n++
	}
	return n
}

// Share of messages of each kind.
const (
	delayedShare   = 0.5              // sent with DeliverAfter(0–-max-delay)
	failOnceShare  = 0.10             // failOnce
	failLaterShare = 0.03             // failLater
	sendTimeout    = 5 * time.Second  // bounds one Send
	sendPatience   = 60 * time.Second // a failed Send is retried, with the same ID, this long
	senders        = 8
)

// planMessages draws n messages, the delayed ones due up to maxDelay after
// their Send.
func planMessages(rng *rand.Rand, run string, n int, maxDelay time.Duration) []*message {
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
	giveUp := time.Now().Add(sendPatience)
	wait := 250 * time.Millisecond
	for {
		sctx, cancel := context.WithTimeout(ctx, sendTimeout)
		attempt := time.Now()
		m.err = b.Send(sctx, Work{Seq: m.seq, Fail: m.fail}, opts...)
		cancel()
		if m.err == nil {
			m.sent = true
			return
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(giveUp) {
			log.Warn("send failed; giving up", slog.String("id", m.id), slog.Int("attempts", m.retries()+1), slog.Any("error", m.err))
			return
		}
		m.failures = append(m.failures, sendFailure{at: attempt, err: m.err})
		sleepCtx(ctx, wait)
		wait = min(2*wait, 2*time.Second)
	}
}
