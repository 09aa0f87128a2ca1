package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/postbus/bus/internal/loop"
)

const (
	// concludeBackoffMin and concludeBackoffMax bound the wait before a
	// message that could not be concluded (its delayed retry could not be
	// stored, the error queue did not accept it) goes back to the
	// transport: without it, a store outage makes the transport hand the
	// message back at once, hundreds of times a second.
	concludeBackoffMin = 200 * time.Millisecond
	concludeBackoffMax = 10 * time.Second
)

// retryLater schedules a copy of the message for this endpoint's queue
// after d, counting a delayed retry. The transport's copy is acknowledged
// only once the store has the retry. The delay is relative, so a store with
// a clock of its own computes the due time on it.
func (b *Bus) retryLater(ctx context.Context, env *Envelope, d time.Duration, attempt int, cause error) error {
	if reason := messageIDProblem(env.ID); reason != "" {
		// A foreign producer's ID the store cannot key a row by: no delayed
		// retry, or the message would bounce in the input queue forever.
		return b.moveToError(ctx, env, "handler", attempt, fmt.Errorf("%w (no delayed retry: %s)", cause, reason))
	}
	retry := env.Clone()
	n := delayedRetries(env) + 1
	d = max(d, 0)
	retry.SetHeader(HeaderDelayedRetries, strconv.Itoa(n))
	retry.SetHeader(headerPriorAttempts, strconv.Itoa(priorAttempts(env)+attempt))
	retry.SetHeader(HeaderFailureReason, cause.Error())
	retry.Destination = b.cfg.Endpoint
	retry.DueAt = b.clock.Now().Add(d).UTC()
	sctx, cancel := loop.Detach(ctx, b.cfg.Dispatcher.SendTimeout)
	defer cancel()
	sctx, endSend := b.observeSend(sctx, retry, SendDelayedRetry)
	err := b.schedule(sctx, []pending{{env: retry, delay: d}})
	if endSend != nil {
		endSend(err)
	}
	if err != nil {
		b.log.Error("cannot schedule a delayed retry; the message stays in the input queue",
			slog.String(logKeyMessageID, env.ID), slog.Any(logKeyError, err))
		return err
	}
	b.metrics.retried.Add(1)
	b.emit(ctx, ObserverEvent{Kind: EventRetry, Reason: "delayed", Envelope: retry, Attempt: attempt, Delay: d, Err: cause})
	b.log.Info("handler failed; retrying later", slog.String(logKeyMessageID, env.ID), slog.String(logKeyType, env.Type),
		slog.Int("delayed_retry", n), slog.Duration("after", d), slog.Int(logKeyAttempt, attempt), slog.Any(logKeyError, cause))
	return nil
}

func delayedRetries(env *Envelope) int {
	h := env.Header(HeaderDelayedRetries)
	if h == "" {
		return 0 // the usual case: no parse, no error allocated
	}
	n, _ := strconv.Atoi(h)
	return n
}

// headerPriorAttempts counts the handling attempts of the deliveries before
// a delayed retry, so the error queue's HeaderFailureAttempts counts every
// attempt. A retry from the error queue or the failed store removes it.
const headerPriorAttempts = "postbus.retries.attempts"

func priorAttempts(env *Envelope) int {
	h := env.Header(headerPriorAttempts)
	if h == "" {
		return 0
	}
	n, _ := strconv.Atoi(h)
	return max(n, 0)
}

// delayedRetryStore returns the store delayed retries go through, or nil
// when they are skipped. A delayed retry moves the message from the
// transport into the store; with a broker transport and a store that is not
// durable, a restart would lose it, so such a bus skips delayed retries
// (immediate retries, then the error queue). Only when both are in memory
// do delayed retries use the in-memory store.
func (b *Bus) delayedRetryStore() ScheduledStore {
	if b.store == nil || !b.cfg.Persistence.Durable() && !b.inMemoryTransport() {
		return nil
	}
	return b.store
}

func (b *Bus) inMemoryTransport() bool {
	return b.identity == memoryIdentity
}

// warnNonDurableRetries logs, at Start, that delayed retries are skipped
// and how to have them.
func (b *Bus) warnNonDurableRetries() {
	if b.store == nil || b.retryStore != nil || b.cfg.Retries.Delayed == 0 {
		return
	}
	b.log.Warn("delayed retries are off: the persistence is not durable, and a message moved from the broker into it "+
		"would be lost on restart; failing messages get immediate retries, then go to the error queue. "+
		"Set Config.Persistence to a durable store (postgres.New, mysql.New, sqlite.Open, mongodb.New, or redis.NewPersistence on a server that keeps its data) to have delayed retries",
		slog.String("persistence", fmt.Sprintf("%T", b.cfg.Persistence)),
		slog.String("transport", fmt.Sprintf("%T", b.transport)))
}

// concluded passes on the result of processing one delivery. When the
// message could not be concluded and goes back to the transport, it first
// waits a backoff that grows while such failures go on (the store or the
// error queue is down), so the transport does not hand it back at once.
func (b *Bus) concluded(ctx context.Context, err error) error {
	if err == nil {
		b.unconcluded.Store(0)
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	n := b.unconcluded.Add(1)
	wait := concludeBackoffMin << min(n-1, 8)
	loop.Sleep(ctx, b.clock, min(wait, concludeBackoffMax))
	return err
}
