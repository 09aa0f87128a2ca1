// Package storetest is the test kit of the SQL stores (postgres, mysql,
// sqlite): what their test packages would otherwise each write again.
//
//   - service.go: the shared connection to a test server, opened lazily,
//     that skips a test loudly outside CI and fails it under CI=true when
//     the server is not reachable; Main, the common TestMain (child roles,
//     closing the shared handle, the goroutine-leak check).
//   - conformance.go: Conformance runs every bustest suite a store declares
//     it should pass.
//   - worker.go, worker_run.go: the worker of the multi-process and failover
//     tests, a bus whose dispatcher claims from the store under test; a
//     module only says how to open its store and record a receipt.
//   - multiproc.go, failover.go: those tests' bodies, a module only says
//     how to read its tables.
//
// The driver modules import it from their tests and from their worker
// programs only. It uses the standard library and the core packages only.
package storetest
