// Package bus is Postbus: a service bus for Go. Endpoints send commands and
// publish events to each other over a pluggable Transport, and any message
// can be sent for delivery later with DeliverAfter or DeliverAt, durably and
// on every transport, through the endpoint's Persistence.
//
// # Endpoints and messages
//
// A Bus is one endpoint: a name, an input queue of the same name, handlers
// and routes. Any Go value that the Serializer (JSON by default) can encode
// is a message; its type name (MessageName) travels with it. Commands go to
// one endpoint (Send, routed with Route or To), events to every endpoint that
// handles their type (Publish), replies back to the sender (Reply).
//
//	b, _ := bus.New(bus.Config{Endpoint: "sales"})
//	bus.Handle(b, func(ctx context.Context, m PlaceOrder) error { ... })
//	bus.Route[ChargeCard](b, "billing")
//	b.Start(ctx)
//	b.Send(ctx, ChargeCard{...})
//
// # Handling and recoverability
//
// Handlers run with at most Config.Concurrency at once. A message is
// acknowledged only after its handlers returned nil, or after it was moved
// to the error queue: a failing handler is retried Config.Retries.Immediate
// times, then the message goes to Config.ErrorQueue with headers that say
// why, where, when and after how many attempts. Messages that can never be
// handled (unknown type, undecodable body) go there at once. A panic is a
// failure. Messages sent with the handler's ctx are released only when the
// handler succeeds.
//
// # Delayed delivery
//
// With DeliverAfter or DeliverAt, the last step of the outgoing pipeline
// stores the message in the persistence's ScheduledStore instead of sending
// it. A dispatcher on every started, receiving bus claims due rows (locked
// in a transaction on PostgreSQL and MySQL/MariaDB, so a crashed process's
// rows are free at once; leased on the other stores), hands them to the
// transport, and deletes them after the transport accepted them: at least
// once, never early, each due message sent by one instance when several
// share a store. The in-memory persistence is not
// durable; the bus warns once when a delayed message goes to it.
//
// # Batches
//
// SendBatch sends or schedules the messages of a Batch, each with its own
// options, in one call: every message is checked first, then all are
// stored with one StoreOutgoing call (one transaction on PostgreSQL and
// SQLite), immediate ones as rows due at once, or none is.
//
// # Recurring schedules
//
// AddRecurring declares a message sent on a Schedule (Every, or any value
// with robfig/cron's Next method), before Start. There is no leader: every
// process that declares a schedule runs the same step, at Start (before
// its dispatcher claims anything) and whenever a tick it stored falls due.
// A step reads the schedule's record in the persistence's RecurringStore,
// keeps the next two ticks stored ahead as ordinary scheduled rows, and
// applies what it planned with one compare-and-set on the record that also
// stores and cancels rows. A row's message ID comes from the schedule's
// name and its tick, and a store keeps one row per ID, so each tick is
// sent once, by the ordinary dispatcher, never early; the tick after the
// one being sent is already stored, so a process killed at any moment
// loses none. Ticks that passed while no declaring process ran are dealt
// with by the schedule's MissedPolicy. A declaration with another
// definition replaces the stored one (the latest process to start wins,
// and processes of an older definition stop storing for that name);
// pause, resume and trigger are stored, so every process sees them.
//
// # Drivers
//
// Transports and persistences for real brokers and databases live in their
// own modules (postgres, sqlite, mongodb, rabbitmq, nats), so this module has
// no dependencies. Package bustest holds the conformance suites they pass.
//
// What a transport or a store implements (Transport, Persistence,
// ScheduledStore and their optional capabilities, the other store
// interfaces and their records, Envelope and its codec) is declared in
// package github.com/postbus/bus/backend, for the people who write them.
// This package names each of those types by an alias (Transport is
// backend.Transport), so either name may be used.
package bus
