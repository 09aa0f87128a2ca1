// Package sqlstore is the kit SQL stores are built on: the logic of a
// Postbus store written once, above a Dialect that holds what one
// database makes different. The PostgreSQL, MySQL/MariaDB and SQLite
// stores of this repository are a dialect each over it. It imports only
// the standard library and package backend.
//
// # Connections
//
// The kit runs its statements on a DB (a pool that begins transactions),
// a Tx or any Querier. FromDB and FromTx adapt database/sql; a store on
// another client (pgx) adapts it in a few lines. A Row reports no row as
// an error wrapping sql.ErrNoRows, whatever the client.
//
// # Dialects
//
// A Dialect names the database (the prefix of every error), classifies
// its errors (a unique-key violation, a transaction the server rolled
// back, a row too large), carries values the way its columns take them
// (text as bytes for binary columns, times as the server stores them),
// and finds the transaction a context carries (the outbox handling's or
// the caller's). Each part of the store (sagas, the outbox and inbox, the
// failed store, recurring schedules, the scheduled store) takes the
// dialect plus the statements of that part, written in the database's
// SQL: the statements differ, the logic around them does not.
//
// docs/guide/writing-a-store.md walks through writing one.
package sqlstore
