// Package mongodb is a durable Postbus persistence in MongoDB: it stores
// delayed messages until they are due, for the bus's dispatcher, and lets
// several processes share the store safely.
//
//	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
//	…
//	store, err := mongodb.New(client.Database("billing"), mongodb.Options{})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Persistence: store})
//
// # Documents
//
// Each scheduled message is one document in the collection Options.Collection
// ("outgoingmessages" by default):
//
//	_id           the message ID (so storing an ID twice keeps one document)
//	kind          int32: bus.Kind (command, event, reply)
//	envelope      binary: bus.MarshalEnvelope bytes
//	due_at        int64: when it was due, exact Unix nanoseconds
//	available_at  date: when it next becomes claimable (index with _id)
//	lease_until   date or null: the current claim's lease
//	failures      int32: dispatch failures so far
//	last_error    string: the last dispatch failure
//	created_at    date: when it was stored (client clock; informational)
//	claims        int64: claim generation, see Claims below
//
// available_at starts at due_at rounded up to the millisecond (BSON dates
// hold milliseconds; rounding up keeps a message from being early), is pushed
// forward by each claim's lease and by each failure's retry time, and goes
// back to due_at on release. due_at is kept exact as an integer because the
// store must return DueAt to the nanosecond it was given.
//
// # Clock
//
// Due and lease times compare on the server's clock, so a client with a
// skewed clock can never make a message early. MongoDB would allow an update
// pipeline with $$NOW, but FerretDB (the MongoDB-compatible server the tests
// run on) does not implement update pipelines, so each claim reads the
// server's time once from the hello command's localTime and uses it in the
// filter and for the lease. The now argument of ClaimDueOutgoing is ignored.
// The time read is at most a millisecond plus a round trip behind the
// server's when the claim filter runs: a message can be that much late, never
// early. Retry times given to RecordOutgoingFailures are the caller's.
//
// # Claims
//
// A claim must be exclusive when several processes claim at once. On MongoDB
// findOneAndUpdate is atomic per document, but on FerretDB v1 it is not: it
// reads the document, then writes it back by _id, and two concurrent claimers
// both win (measured: 494 of 500 documents claimed twice by six claimers).
// What both servers do atomically is refuse a second insert of the same _id.
// So a claim takes a ticket: for each candidate found by available_at <= now,
// it inserts {_id: "<message ID>#<generation>"} into Options.ClaimsCollection
// ("outgoingmessages_claims" by default), where the generation is the
// document's claims counter. Exactly one claimer wins each generation; the
// winners then set available_at and lease_until to now + lease and increment
// claims, in one UpdateMany filtered by _id. A claim costs four round trips
// however many messages it takes (hello, find, insert tickets, update), fewer
// than one findOneAndUpdate per message.
//
// A claimer that crashes between winning a ticket and leasing the document
// leaves a ticket whose lease passes; the next claimer sees it is stale and
// takes the next generation, so the message is delayed by at most one lease,
// never stuck. Tickets are deleted with their message.
//
// # Batching
//
// StoreOutgoing is one unordered insert that ignores duplicate keys;
// DeleteOutgoing is two DeleteMany calls (messages, then tickets);
// RecordOutgoingFailures is one UpdateMany per distinct error text and retry
// time; ReleaseOutgoing reads the leased documents' due times and issues one
// UpdateMany per distinct due time (no update pipelines to copy due_at into
// available_at on FerretDB). Updates are never bulk writes of many update
// statements: FerretDB v1 keeps each statement's cursor open until the
// command ends and stalls on large ones.
//
// # Testing
//
// The tests run against MongoDB when POSTBUS_TEST_MONGODB_URI is set, and
// otherwise build and start an embedded FerretDB v1.24.2 (the testserver
// folder, its own module) on loopback, on the local PostgreSQL in a database
// of its own (or its SQLite handler). docs/persistence/mongodb.md has the
// details.
package mongodb
