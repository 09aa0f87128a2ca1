package kafka

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// partitioner puts a record with a key (an ordering key) on the partition
// its key hashes to, as Kafka's Java client does (murmur2), so every
// producer agrees; records without a key go round-robin over the
// partitions. Sticky batching of keyless records, franz-go's default,
// would put a burst of small commands on one partition and so on one
// consumer of the queue's group.
type partitioner struct{ keyed kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{keyed: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{keyed: p.keyed.ForTopic(topic)}
}

type topicPartitioner struct {
	keyed kgo.TopicPartitioner
	next  atomic.Uint64
}

func (t *topicPartitioner) RequiresConsistency(r *kgo.Record) bool { return len(r.Key) > 0 }

func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if len(r.Key) > 0 {
		return t.keyed.Partition(r, n)
	}
	return int(t.next.Add(1) % uint64(n))
}
