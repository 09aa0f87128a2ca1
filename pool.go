package bus

import (
	"fmt"
	"log/slog"
	"strings"
)

// checkPool refuses, or for a serialized pool warns about, a bus that
// needs more connections than its persistence's pool opens. Handlings
// count only with the outbox on: without it, none holds a connection
// while it waits for another.
func (b *Bus) checkPool() error {
	pr, ok := b.cfg.Persistence.(PoolReporter)
	if b.cfg.SendOnly || !ok {
		return nil
	}
	p := pr.ConnectionPool(b.transport)
	if p.MaxConns <= 0 {
		return nil
	}
	handlings := 0
	if b.outbox != nil {
		handlings = b.cfg.Concurrency
	}
	others, parts := 0, []string{}
	add := func(n int, what string) {
		if n > 0 {
			others += n
			parts = append(parts, fmt.Sprintf("%s %d", what, n))
		}
	}
	if b.store != nil && !b.cfg.Dispatcher.Disabled {
		add(1, "dispatcher")
		add(p.WatchConns, "dispatcher's LISTEN")
	}
	if p.TransportShares {
		add(1, "transport")
		add(p.TransportConns, "transport's LISTEN")
	}
	need := handlings + others
	if need <= p.MaxConns {
		return nil
	}
	if p.Serialized {
		if held := p.MaxConns - p.WatchConns - p.TransportConns; handlings > held {
			b.log.Warn(fmt.Sprintf("the persistence's pool opens MaxConns %d connection(s) and its callers take turns: "+
				"with the outbox each handling holds one until it commits, so of Concurrency %d at most %d run at once "+
				"and the dispatcher waits between them; set Concurrency to %d to say so", p.MaxConns, handlings, max(held, 1), max(held, 1)),
				slog.Int("max_conns", p.MaxConns), slog.Int("concurrency", handlings))
		}
		return nil
	}
	breakdown := strings.Join(parts, ", ")
	if handlings == 0 {
		return &ConfigError{Field: "Persistence", Reason: fmt.Sprintf(
			"the bus needs %d connections of the persistence's pool (%s), but the pool has MaxConns %d; raise it to at least %d",
			need, breakdown, p.MaxConns, need)}
	}
	reason := fmt.Sprintf("with the outbox, each of Concurrency %d handlings holds a connection of the persistence's pool "+
		"until it commits, and the bus needs %d more (%s): %d in all, but the pool has MaxConns %d; "+
		"raise the pool's MaxConns to at least %d", handlings, others, breakdown, need, p.MaxConns, need)
	if fit := p.MaxConns - others; fit > 0 {
		reason += fmt.Sprintf(" or lower Concurrency to %d", fit)
	}
	return &ConfigError{Field: "Concurrency", Reason: reason}
}
