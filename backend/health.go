package backend

import "context"

// Pinger is implemented by transports and persistences that can check
// cheaply that their broker or database answers (a connection pool's
// ping, a round trip to the server). Bus.Health calls it; a backend
// without it is reported with an unknown reachability.
type Pinger interface {
	// Ping returns nil when the server answered within ctx.
	Ping(ctx context.Context) error
}
