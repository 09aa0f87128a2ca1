package main

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/rabbitmq"
)

// rabbitmqDriver uses the run's own queues (the endpoint bench-<run> and
// its -error and -deadletter queues) and events exchange, all deleted by
// the owner at the end.
func rabbitmqDriver() transportDriver {
	return transportDriver{
		shared:      true,
		serverProcs: []string{"beam.smp"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			exchange := "bench-" + run + ".events"
			t, err := rabbitmq.New(o.rabbitmqURL, rabbitmq.Options{
				EventsExchange: exchange, ConnectionName: "postbus-bench-" + run, Logger: o.logger,
			})
			if err != nil {
				return nil, nil, err
			}
			cleanup := func() {
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = t.Close(cctx)
				if owner {
					queue := "bench-" + run
					// queue-events: the Ticked receiver of throughput on PostgreSQL.
					if err := deleteRabbitMQ(o.rabbitmqURL, exchange, queue, queue+"-events", queue+"-error", queue+"-deadletter"); err != nil {
						o.logger.Error("cannot delete the run's queue and exchange", "error", err)
					}
				}
			}
			return t, cleanup, nil
		},
	}
}

// deleteRabbitMQ removes a run's queues and events exchange.
func deleteRabbitMQ(url, exchange string, queues ...string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second)})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	for _, queue := range queues {
		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			return fmt.Errorf("delete queue %s: %w", queue, err)
		}
	}
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		return fmt.Errorf("delete exchange %s: %w", exchange, err)
	}
	return nil
}
