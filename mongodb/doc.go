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
//	due_at        int64: when it is due, exact Unix nanoseconds
//	available_at  date: when it next becomes claimable
//	transport     string: the identity of the transport it is sent through
//	token         string: the lease token of the latest claim (absent before)
//	lease_until   date or null: the end of the lease of the claim holding it
//	failures      int32: dispatch failures so far
//	last_error    string: the last dispatch failure
//	created_at    date: when it was stored (client clock; informational)
//	retry_at      date or absent: the end of the last failure's backoff
//
// available_at starts at due_at rounded up to the millisecond (BSON dates
// hold milliseconds; rounding up keeps a message from being early), is pushed
// forward by each claim's lease and by each failure's retry time (also kept
// in retry_at), and goes back on release to when it was claimable before
// the claim: the later of due_at and retry_at, so a release never cuts a
// backoff short. due_at is kept exact as an integer because the
// store must return DueAt to the nanosecond it was given. Setup creates the
// index (transport, available_at, _id), which serves claims and
// NextDueOutgoing.
//
// # Transports
//
// A claim and NextDueOutgoing consider only the documents of the given
// transport identity and those stored without one (transport "" or, in
// documents stored by earlier versions, missing), so buses that share a
// database but not a broker never send each other's messages.
//
// # Lease tokens
//
// Each claim round gives the documents it leases a new random 128-bit
// token, returned as OutgoingMessage.Token. Delete, release and
// record-failure filter by _id, token and a set lease_until, so they change
// only documents that claim still holds, and return how many they changed: a
// message re-claimed after its lease lapsed, or cancelled and stored again,
// is left alone. Release and record-failure clear lease_until and keep the
// token. CancelOutgoing deletes a document only while no lease on it runs
// (lease_until null or passed on the server's clock).
//
// # Clock
//
// Due, lease and retry times are compared and computed on the server's
// clock, so a client with a skewed clock can never make a message early.
// MongoDB would allow an update pipeline with $$NOW, but FerretDB (the
// MongoDB-compatible server the tests run on) does not implement update
// pipelines. So the store reads the server's time from the hello command's
// localTime: once per claim (the filter's now and the lease end), once per
// StoreOutgoing call holding a message with a Delay (due = server time +
// Delay), once per RecordOutgoingFailures call holding a RetryAfter, once
// per CancelOutgoing, and in StoreNow. The now argument of ClaimDueOutgoing
// is ignored. localTime has millisecond precision: a claim's now is up to a
// millisecond plus a round trip behind the server, which can make a message
// that much late, never early; a Delay or RetryAfter is added to the time
// read plus a millisecond for the same reason.
//
// # Claims
//
// A claim round finds candidates (available_at <= now, earliest first),
// leases them with a conditional update, and reads back the documents it
// leased. The update matches a document only while it still has the token
// it was found with and is claimable, and sets a new token: on MongoDB,
// where an update is atomic per document, that is a compare-and-swap, and
// it is what keeps a claim from returning a stale document. The documents
// returned are the ones read back by the new token, as the update left
// them: a message cancelled and stored again between the find and the update
// is returned as stored again, or left to the next round.
//
// On FerretDB v1 an update is not atomic: it reads the matching documents,
// applies the update in its own process, and writes each one back by _id
// alone. Two claimers with the same filter both match and both "win"
// (measured with six claimers on two clients, one conditional updateOne per
// document on _id, a claim counter and available_at <= now: 381 to 412 of
// 500 documents claimed twice). What it does atomically is refuse a second insert of an
// _id. So before its update a claimer inserts a claim ticket per candidate
// into Options.ClaimsCollection ("outgoingmessages_claims" by default),
// {_id: "<message ID>#<token found>#<step>", msg, until: lease end}: one
// claimer wins each, the others get a duplicate key and skip the candidate.
// The winner deletes its tickets after its update, so a claimer that wins
// the same ticket later updates after that change, and its filter no longer
// matches. Tickets exist only while a claim is in flight. A claimer that
// crashes holding a ticket delays its candidates by at most one lease: once
// the ticket's until has passed, the next claimer takes the next step.
// Setup deletes tickets abandoned more than a day ago.
//
// A round finds up to four times the messages it wants (at most 1,000 more)
// and works through them with ticket inserts, so claimers racing for the
// same earliest messages go on to the next ones without another find. A
// round that leased some messages ends the claim, even with fewer than the
// limit; one that leased none is followed by another (at most four), which
// skips the messages found held by others. The guarantee is the
// lease's: a claimer that stalls longer than its lease may see its messages
// claimed again (at-least-once delivery, same message ID). On FerretDB a
// settle from a claimer whose lease lapsed can, in the instant between
// FerretDB's read and write, still change a message another claim has just
// taken, for the same reason.
//
// # Sagas
//
// A Persistence is a bus.SagaStore, in Options.SagaCollection
// (Collection + "_sagas" by default). Every write of an instance inserts a
// new document, _id "<len(saga)>:<saga>:<seq>:<correlation>", with fields
// saga, correlation, seq, base, instance (the instance ID), state (binary:
// the saga's JSON bytes exactly), timeouts and written_at; the version is
// seq - base. A writer reads the latest document (index saga, correlation,
// seq descending) and inserts the next seq: a duplicate key means another
// writer won, an error wrapping bus.ErrSagaConflict. After a write the
// instance's earlier documents are removed. A delete writes a completion
// mark, which Setup removes a day later. Writes never rely on the
// atomicity of a conditional update, which FerretDB v1 lacks (see
// "Claims").
//
// # Recurring schedules
//
// A Persistence is a bus.RecurringStore, in Options.RecurringCollection
// (Collection + "_recurring" by default). As with sagas, every change of a
// schedule's record inserts a new document, _id "<len(name)>:<name>:<seq>",
// with fields name, seq, fingerprint, schedule, generation, paused, last
// and ticks (exact Unix nanoseconds), alive, spec (the definition of a
// schedule made at runtime, null for a declared one), due (Unix
// nanoseconds; absent: never), runs, skipped, written_at, and deleted for
// the mark a deletion writes. The insert of the next seq is the
// compare-and-set: a duplicate key means another process changed the
// schedule first.
//
// It is also a bus.RecurringRuntimeStore. ClaimDueRecurring finds the
// writes with a spec and a due not after now through the index (due,
// name), and claims each that is still its schedule's latest write by
// inserting the next one, due a lease ahead: of racing claimers one
// wins. Each writer removes the due of the write it follows, and a claim
// removes the due of an earlier write it finds, so earlier writes are
// never claimed. ListRecurringPage seeks the names with the prefix one by
// one through the (name, seq descending) index.
//
// Storing an advance's occurrences and its record in one step would take a
// multi-document transaction, which FerretDB and standalone servers lack.
// So the record's write is the commit point and carries the advance's rows
// as pending; the writer then stores them (an ID already stored keeps its
// row), cancels the rows the advance names unless leased, and marks the
// write done. If the writer stops in between, the next process to read the
// schedule finishes the advance once it is five seconds old, and no later
// change is written before that: every reader sees the advance whole or
// not at all. Earlier writes are removed once a day old, by Setup and by
// every 256th write of a schedule (up to 512 of its oldest).
//
// # Operations
//
// Persistence implements bus.ScheduledBrowser and bus.FailedStore, which
// the postbus CLI and the console use. Documents carry their message type
// (message_type); the (due_at, _id) and (message_type, due_at, _id)
// indexes serve listings and the due-time histogram (one index count per
// bucket). Failed messages live in Options.FailedCollection, indexed by
// (last_failed, _id) and (failure_group, last_failed, _id). On FerretDB,
// which lacks the $min and $max accumulators, groups of equal size are
// ordered by group rather than by latest failure.
//
// # Batching
//
// StoreOutgoing is one unordered insert that ignores duplicate keys. A claim
// round is a hello, a find, one or a few ticket inserts, one UpdateMany per
// distinct token among the candidates won (one for messages never claimed),
// a find of the leased documents by token, and a ticket delete.
// DeleteOutgoing is one DeleteMany per token; RecordOutgoingFailures one
// UpdateMany per token, error text and retry time; ReleaseOutgoing reads the
// held documents' due and retry times and issues one UpdateMany per
// distinct time (no update pipelines to copy them into available_at on
// FerretDB).
// Updates are never bulk writes of many update statements: FerretDB v1 keeps
// each statement's cursor open until the command ends and stalls on large
// ones.
//
// # Upgrading
//
// Documents stored by earlier versions need no migration: their missing
// transport and token read as empty, so any dispatcher claims them, and
// their claims field is ignored. The index postbus_available_at on the
// message collection and postbus_msg on the claims collection are no longer
// used and can be dropped; old tickets there are never read again and can be
// deleted.
//
// # Testing
//
// The tests run against MongoDB when POSTBUS_TEST_MONGODB_URI is set, and
// otherwise build and start an embedded FerretDB v1.24.2 (the testserver
// folder, its own module) on loopback, on the local PostgreSQL in a database
// of its own (or its SQLite handler). docs/persistence/mongodb.md has the
// details.
package mongodb
