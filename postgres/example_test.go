package postgres_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

func ExampleNew() {
	ctx := context.Background()
	// pgxpool connects lazily; New does not touch the database either.
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Options{Schema: "billing"})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bus.New(bus.Config{Endpoint: "billing", Persistence: store})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = b // b.Start(ctx) runs store.Setup, then dispatches due messages
	fmt.Println(store.Table(), store.Channel(), store.Durable())
	// Output: "billing"."outgoing_messages" postbus.billing.outgoing_messages true
}

func ExampleNew_invalidName() {
	_, err := postgres.New(new(pgxpool.Pool), postgres.Options{Table: "messages; DROP TABLE users"})
	fmt.Println(err)
	// Output: postgres: invalid Table name "messages; DROP TABLE users": must be letters, digits and underscores, not starting with a digit
}

func ExampleMigrations() {
	for _, stmt := range postgres.Migrations() {
		fmt.Println(stmt + ";")
	}
	// Output:
	// CREATE SCHEMA IF NOT EXISTS "public";
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages" (
	// 	id           text        COLLATE "C" PRIMARY KEY,
	// 	kind         smallint    NOT NULL,
	// 	envelope     bytea       NOT NULL,
	// 	due_at       timestamptz NOT NULL,
	// 	available_at timestamptz NOT NULL,
	// 	lease_until  timestamptz,
	// 	lease_token  text        COLLATE "C",
	// 	prior_available_at timestamptz,
	// 	transport    text        COLLATE "C" NOT NULL DEFAULT '',
	// 	failures     integer     NOT NULL DEFAULT 0,
	// 	last_error   text        NOT NULL DEFAULT '',
	// 	created_at   timestamptz NOT NULL DEFAULT now()
	// );
	// ALTER TABLE "public"."outgoing_messages"
	// 	ADD COLUMN IF NOT EXISTS lease_token text COLLATE "C",
	// 	ADD COLUMN IF NOT EXISTS transport   text COLLATE "C" NOT NULL DEFAULT '',
	// 	ADD COLUMN IF NOT EXISTS prior_available_at timestamptz;
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_claim_idx" ON "public"."outgoing_messages" (transport, available_at, id);
	// DROP INDEX IF EXISTS "public"."outgoing_messages_available_at_idx";
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages_inbox" (
	// 	endpoint   text        COLLATE "C" NOT NULL,
	// 	message_id text        COLLATE "C" NOT NULL,
	// 	handled_at timestamptz NOT NULL DEFAULT now(),
	// 	PRIMARY KEY (endpoint, message_id)
	// );
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_inbox_purge_idx" ON "public"."outgoing_messages_inbox" (handled_at);
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages_sagas" (
	// 	saga        text        COLLATE "C" NOT NULL,
	// 	correlation text        COLLATE "C" NOT NULL,
	// 	id          text        COLLATE "C" NOT NULL,
	// 	state       json        NOT NULL,
	// 	timeouts    text[]      NOT NULL DEFAULT '{}',
	// 	version     bigint      NOT NULL,
	// 	created_at  timestamptz NOT NULL DEFAULT now(),
	// 	updated_at  timestamptz NOT NULL DEFAULT now(),
	// 	PRIMARY KEY (saga, correlation)
	// );
	// ALTER TABLE "public"."outgoing_messages"
	// 	ADD COLUMN IF NOT EXISTS message_type text COLLATE "C" NOT NULL DEFAULT '';
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_due_idx" ON "public"."outgoing_messages" (due_at, id);
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_type_due_idx" ON "public"."outgoing_messages" (message_type, due_at, id);
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages_failed" (
	// 	id            text        COLLATE "C" PRIMARY KEY,
	// 	message_type  text        COLLATE "C" NOT NULL,
	// 	endpoint      text        COLLATE "C" NOT NULL,
	// 	queue         text        COLLATE "C" NOT NULL,
	// 	kind          text        NOT NULL,
	// 	reason        text        NOT NULL,
	// 	failure_group text        COLLATE "C" NOT NULL,
	// 	attempts      integer     NOT NULL,
	// 	failures      integer     NOT NULL,
	// 	first_failed  timestamptz NOT NULL,
	// 	last_failed   timestamptz NOT NULL,
	// 	envelope      bytea       NOT NULL
	// );
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_failed_last_idx" ON "public"."outgoing_messages_failed" (last_failed, id);
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_failed_grp_idx" ON "public"."outgoing_messages_failed" (failure_group, last_failed, id) INCLUDE (first_failed);
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages_recurring" (
	// 	name        text          COLLATE "C" PRIMARY KEY,
	// 	fingerprint text          NOT NULL,
	// 	schedule    text          NOT NULL,
	// 	generation  bigint        NOT NULL,
	// 	paused      boolean       NOT NULL DEFAULT false,
	// 	last_tick   timestamptz,
	// 	ticks       timestamptz[] NOT NULL DEFAULT '{}',
	// 	updated_at  timestamptz   NOT NULL DEFAULT now(),
	// 	alive_until timestamptz,
	// 	spec        bytea,
	// 	due_at      timestamptz,
	// 	runs        bigint        NOT NULL DEFAULT 0,
	// 	skipped     bigint        NOT NULL DEFAULT 0
	// );
	// ALTER TABLE "public"."outgoing_messages_recurring"
	// 	ADD COLUMN IF NOT EXISTS alive_until timestamptz,
	// 	ADD COLUMN IF NOT EXISTS spec        bytea,
	// 	ADD COLUMN IF NOT EXISTS due_at      timestamptz,
	// 	ADD COLUMN IF NOT EXISTS runs        bigint NOT NULL DEFAULT 0,
	// 	ADD COLUMN IF NOT EXISTS skipped     bigint NOT NULL DEFAULT 0;
	// CREATE INDEX IF NOT EXISTS "outgoing_messages_recur_due_idx" ON "public"."outgoing_messages_recurring" (due_at, name) WHERE spec IS NOT NULL;
	// CREATE TABLE IF NOT EXISTS "public"."outgoing_messages_runs" (
	// 	name      text        COLLATE "C" PRIMARY KEY,
	// 	run_id    text        COLLATE "C" NOT NULL,
	// 	run_until timestamptz NOT NULL
	// );
}
