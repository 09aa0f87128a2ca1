// Package e2e holds the end-to-end and fault-injection tests of Postbus:
// whole buses on the real services (PostgreSQL, RabbitMQ, NATS JetStream)
// running on this machine, asserting outcomes by message ID.
//
// # What runs
//
//   - TestDelayedTwoInstances: two instances of one endpoint schedule 2,000
//     messages over 5 s in PostgreSQL, over RabbitMQ and over NATS; each
//     message is handled exactly once, none early.
//   - TestBrokerOutage: the broker goes away while messages fall due; they
//     wait in the store, failures counted, and are delivered when it returns.
//     RabbitMQ is taken away by cutting a TCP proxy (internal/faultproxy)
//     between the transport and the shared broker; NATS by shutting down and
//     restarting an embedded nats-server on the same port and store.
//   - TestFault...: PostgreSQL restarted, RabbitMQ connections dropped, a
//     dispatcher process killed after claiming, a transport rejecting one
//     message. Each breaks only what it owns: the PostgreSQL restart runs on
//     a throwaway cluster that the test creates in a temporary directory on
//     a free port (internal/pgcluster) and stops at the end; the RabbitMQ
//     connections are dropped at the test's TCP proxy (internal/faultproxy),
//     never at the broker. They run one at a time, before the parallel
//     tests, so each fault lands while its messages fall due.
//
// # Running
//
//	go test -race -count=1 ./...                 // everything
//	go test -race -count=1 -run Fault ./...      // the fault tests (make test-faults)
//
// Service addresses come from POSTBUS_TEST_POSTGRES_URL,
// POSTBUS_TEST_RABBITMQ_URL and POSTBUS_TEST_NATS_URL (loopback defaults).
// A missing service skips its tests, naming it, except under CI=true, where
// it fails them. The tests never stop, restart or reconfigure these
// services, and name every queue, stream, schema and table they create with
// a random suffix, so two checkouts can run them against the same servers
// at once.
//
// The PostgreSQL fault test needs the server's initdb and postgres binaries
// (the highest version under /usr/lib/postgresql/*/bin, else on PATH, or
// the directory in POSTBUS_TEST_PG_BIN); without them it skips (fails under
// CI=true). Run as root, it runs them as the postgres user.
package e2e
