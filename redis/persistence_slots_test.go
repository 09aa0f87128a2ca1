package redis

import (
	"strings"
	"testing"
)

// keySlot agrees with Redis Cluster (CLUSTER KEYSLOT).
func TestKeySlot(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]uint16{"foo": 12182, "bar": 5061, "": 0, "123456789": 0x31C3} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Partition i's tag is in the i-th of n equal ranges of slots, so masters
// with equal slot ranges hold equal shares of the partitions.
func TestPartitionTagsSpreadOverSlots(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 24, 64} {
		tags := partitionTags("postbus", n)
		for i, tag := range tags {
			s := int(keySlot(strings.Trim(tag, "{}")))
			if lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n; s < lo || s >= hi {
				t.Errorf("n=%d: tag %s of partition %d is in slot %d, want [%d, %d)", n, tag, i, s, lo, hi)
			}
		}
	}
	if got := partitionTags("postbus", 24); got[0] != partitionTags("postbus", 24)[0] {
		t.Error("tags differ between calls")
	}
}
