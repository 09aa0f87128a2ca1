package postgres_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

func ExampleNewTransport() {
	ctx := context.Background()
	// pgxpool connects lazily; NewTransport does not touch the database.
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	tr, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: "bus"})
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := postgres.New(pool, postgres.Options{Schema: "bus"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// With the outbox on, receiving a message, the handler's writes through
	// postgres.Tx(ctx) and the messages it sends commit in one transaction.
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr, Persistence: store,
		Outbox: bus.OutboxConfig{Enabled: true}})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = b // b.Start(ctx) provisions the tables and starts receiving
	fmt.Println(tr.Identity())
	fmt.Println(tr.MessagesTable(), tr.SubscriptionsTable())
	// Output:
	// postgres:app/bus.postbus
	// "bus"."postbus_messages" "bus"."postbus_subscriptions"
}

func ExampleTransportMigrations() {
	ddl, err := postgres.TransportMigrations(postgres.TransportOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, stmt := range ddl {
		fmt.Println(stmt + ";")
	}
	// Output:
	// CREATE SCHEMA IF NOT EXISTS "public";
	// CREATE TABLE IF NOT EXISTS "public"."postbus_messages" (
	// 	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	// 	queue        text COLLATE "C" NOT NULL,
	// 	message_id   text NOT NULL,
	// 	message_type text NOT NULL,
	// 	headers      jsonb,
	// 	body         bytea NOT NULL,
	// 	envelope     bytea NOT NULL,
	// 	enqueued_at  timestamptz NOT NULL DEFAULT now(),
	// 	available_at timestamptz NOT NULL DEFAULT now(),
	// 	lease_token  bigint,
	// 	deliveries   integer NOT NULL DEFAULT 0,
	// 	lease_owner  bigint
	// );
	// DO $$ BEGIN
	// 	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"public"."postbus_messages"'::regclass
	// 		AND attname = 'lease_owner' AND NOT attisdropped) THEN
	// 		ALTER TABLE "public"."postbus_messages" ADD COLUMN lease_owner bigint;
	// 	END IF;
	// END $$;
	// CREATE INDEX IF NOT EXISTS "postbus_messages_claim_idx" ON "public"."postbus_messages" (queue, available_at, seq);
	// CREATE TABLE IF NOT EXISTS "public"."postbus_subscriptions" (
	// 	event_type text COLLATE "C" NOT NULL,
	// 	queue      text COLLATE "C" NOT NULL,
	// 	PRIMARY KEY (event_type, queue)
	// );
}
