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
//   - TestFault...: PostgreSQL restarted, RabbitMQ connections closed, a
//     dispatcher process killed after claiming, a transport rejecting one
//     message. They restart shared services, so they never run in parallel
//     with each other or with the other tests of this package.
//
// # Running
//
//	go test -race -count=1 ./...                 // everything
//	go test -race -count=1 -run Fault ./...      // the fault tests (make test-faults)
//
// Service addresses come from POSTBUS_TEST_POSTGRES_URL,
// POSTBUS_TEST_RABBITMQ_URL and POSTBUS_TEST_NATS_URL (loopback defaults).
// A missing service skips its tests, naming it, except under CI=true, where
// it fails them. The PostgreSQL restart needs pg_ctlcluster and the RabbitMQ
// faults need rabbitmqctl, both run as a user allowed to use them; the
// RabbitMQ faults close only the test's own connections (by connection
// name), never other clients of the broker.
package e2e
