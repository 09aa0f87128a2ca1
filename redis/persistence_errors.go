package redis

import (
	"errors"
	"fmt"
)

// Sentinel errors of the Persistence.
var (
	// ErrNotReplicated is wrapped by every *ReplicationError.
	ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")
	// ErrInvalidRow is returned by StoreOutgoing for a row with an empty ID
	// or no envelope; nothing of the call is stored.
	ErrInvalidRow = errors.New("redis: invalid row")
)

// ReplicationError reports a write that fewer replicas than
// PersistenceOptions.WaitReplicas acknowledged within WaitTimeout. The
// write is on the master: a failover before the replicas catch up may lose
// it. It matches ErrNotReplicated.
type ReplicationError struct {
	Partition int // the partition written to
	Acked     int // the replicas that acknowledged the write
	Wanted    int // PersistenceOptions.WaitReplicas
}

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("redis: partition %d: %d of %d replicas acknowledged the write", e.Partition, e.Acked, e.Wanted)
}

// Unwrap returns ErrNotReplicated.
func (e *ReplicationError) Unwrap() error { return ErrNotReplicated }

// ErrSubscriptionClosed is returned by WatchDue when the subscription
// ended before its ctx did.
var ErrSubscriptionClosed = errors.New("redis: due subscription closed")
