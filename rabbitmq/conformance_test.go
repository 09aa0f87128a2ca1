package rabbitmq_test

import (
	"context"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/rabbitmq"
)

// provisionRecorder remembers the queues provisioned through it, so the
// test deletes them afterwards; the suite picks the names.
type provisionRecorder struct {
	*rabbitmq.Transport
	env *testEnv
}

func (p provisionRecorder) Provision(ctx context.Context, top bus.Topology) error {
	for _, q := range append([]string{top.Queue}, top.Queues...) {
		if q != "" {
			p.env.track(q)
		}
	}
	return p.Transport.Provision(ctx, top)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		e := newEnv(t) // its own events exchange and connection, deleted after the case
		return provisionRecorder{Transport: e.transport(e.options()), env: e}
	}, bustest.Features{NativeRedelivery: true})
}
