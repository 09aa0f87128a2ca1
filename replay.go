package bus

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// ReplayOptions tune Replay.
type ReplayOptions struct {
	// Queue is the error queue to replay. Default: Config.ErrorQueue.
	Queue string
	// Max stops after this many messages. Default 0: no limit.
	Max int
	// IdleTimeout ends the replay when no message arrived for this long.
	// Default 1 s.
	IdleTimeout time.Duration
	// Filter, when set, replays only the messages it accepts; the others
	// stay in the error queue.
	Filter func(env *Envelope) bool
}

// Replay moves messages from the error queue back to the queue they failed
// in (HeaderFailureQueue), with the failure headers and the due time removed, so they are
// handled again; an event that could not be dispatched is published again.
// A message is removed from the error queue only after its queue accepted it.
//
// Replay moves a snapshot: the messages that failed before it started. A
// message that fails again while Replay runs comes back to the error queue
// and stays there; Replay stops when it meets a message it has already
// moved or passed over, when the queue has been idle for IdleTimeout, when
// Max was reached, or when ctx ends. It returns how many messages it moved.
func (b *Bus) Replay(ctx context.Context, opts ReplayOptions) (int, error) {
	if err := b.checkOpen(); err != nil {
		return 0, err
	}
	queue := opts.Queue
	if queue == "" {
		queue = b.cfg.ErrorQueue
	}
	idle := opts.IdleTimeout
	if idle <= 0 {
		idle = time.Second
	}
	started := b.clock.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	moved := 0
	seen := map[string]bool{} // moved or passed over
	activity := make(chan struct{}, 1)
	handler := func(hctx context.Context, env *Envelope) error {
		mu.Lock()
		full := opts.Max > 0 && moved >= opts.Max
		cycled := seen[env.ID]
		mu.Unlock()
		if full || cycled {
			cancel() // done, or back at a message already moved or passed over
			return errSkipReplay
		}
		select {
		case activity <- struct{}{}:
		default:
		}
		if failedAfter(env, started) || opts.Filter != nil && !opts.Filter(env) {
			// Not in the snapshot, or not wanted: put it at the back of the
			// error queue, then acknowledge this copy.
			if err := b.transport.Send(hctx, queue, env); err != nil {
				return err
			}
			mu.Lock()
			seen[env.ID] = true
			mu.Unlock()
			return nil
		}
		if err := b.replayOne(hctx, env); err != nil {
			return err
		}
		mu.Lock()
		seen[env.ID] = true
		moved++
		if opts.Max > 0 && moved >= opts.Max {
			cancel()
		}
		mu.Unlock()
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- b.transport.Receive(rctx, queue, ReceiveOptions{Concurrency: 1}, handler) }()
	timer := b.clock.NewTimer(idle)
	defer timer.Stop()
	for waiting := true; waiting; {
		select {
		case <-activity:
			timer.Stop()
			timer = b.clock.NewTimer(idle)
		case <-timer.C():
			waiting = false
		case <-rctx.Done():
			waiting = false
		}
	}
	cancel()
	err := <-done
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return moved, fmt.Errorf("bus: replay %s: %w", queue, err)
	}
	return moved, nil
}

var errSkipReplay = fmt.Errorf("bus: not replayed")

// failedAfter reports whether env reached the error queue after t: a
// failure newer than the replay, outside its snapshot.
func failedAfter(env *Envelope, t time.Time) bool {
	at, err := time.Parse(time.RFC3339Nano, env.Header(HeaderFailureTime))
	return err == nil && at.After(t)
}

func (b *Bus) replayOne(ctx context.Context, env *Envelope) error {
	out := env.Clone()
	target := out.Header(HeaderFailureQueue)
	clearFailure(out)
	if target == "" && out.Kind == KindEvent {
		return b.transport.Publish(ctx, out)
	}
	if target == "" {
		target = out.Destination
	}
	if target == "" {
		return fmt.Errorf("bus: replay %s: %w: no failure queue header", env.ID, ErrInvalidMessage)
	}
	return b.transport.Send(ctx, target, out)
}
