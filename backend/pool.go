package backend

// PoolReporter is implemented by persistences that draw their connections
// from a pool of bounded size (postgres.New, sqlite.Open). Start reads it
// to refuse a configuration whose pool cannot serve the bus: with the
// outbox on, each handling holds one connection from its start to its
// commit, and the dispatcher and a transport that shares the pool need
// connections besides; when they are all taken, nothing moves.
type PoolReporter interface {
	// ConnectionPool describes the pool as a bus with transport t uses it.
	ConnectionPool(t Transport) ConnectionPool
}

// ConnectionPool is what a PoolReporter tells Start about its pool.
type ConnectionPool struct {
	// MaxConns is the most connections the pool opens at once (pgxpool's
	// MaxConns; 1 for SQLite's single connection). 0: unknown, no check.
	MaxConns int
	// WatchConns is how many connections the persistence's DueNotifier
	// holds while a dispatcher watches (PostgreSQL's LISTEN: 1).
	WatchConns int
	// TransportShares reports that the transport draws on the same pool
	// for its claims, acknowledgements and sends (the PostgreSQL transport
	// on the persistence's pool).
	TransportShares bool
	// TransportConns is how many connections such a transport holds while
	// it receives (its LISTEN connection).
	TransportConns int
	// Serialized reports a pool whose callers take turns on purpose
	// (SQLite's single connection): handlings beyond what it holds wait
	// their turn instead of starving the others, so Start only warns.
	Serialized bool
}
