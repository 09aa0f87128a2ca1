package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/postbus/bus"
	"github.com/postbus/bus/nats"
)

// natsDriver uses the run's own stream (BENCH_<RUN>) and subject prefix,
// so runs never see each other's messages; the owner deletes the stream.
func natsDriver() transportDriver {
	return transportDriver{
		shared:      true,
		serverProcs: []string{"nats-server"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			nc, err := natsio.Connect(o.natsURL, natsio.Name("postbus-bench-"+run))
			if err != nil {
				return nil, nil, fmt.Errorf("connect %s: %w", o.natsURL, err)
			}
			stream := "BENCH_" + strings.ToUpper(run)
			t, err := nats.New(nc, nats.Options{Stream: stream, SubjectPrefix: "bench-" + run, Logger: o.logger})
			if err != nil {
				nc.Close()
				return nil, nil, err
			}
			cleanup := func() {
				_ = t.Close()
				if owner {
					if err := deleteStream(nc, stream); err != nil {
						o.logger.Error("cannot delete the run's stream", "stream", stream, "error", err)
					}
				}
				nc.Close()
			}
			return t, cleanup, nil
		},
	}
}

func deleteStream(nc *natsio.Conn, stream string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}
