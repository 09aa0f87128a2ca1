package redis

import "strconv"

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// partitionTags returns the key prefix ("{tag}") of each of n partitions.
// The tag of partition i is "<prefix>:<i>", or "<prefix>:<i>.<k>" for the
// smallest k that puts it in the i-th of n equal ranges of the 16384 hash
// slots: a cluster that splits its slots evenly over its masters (as
// redis-cli --cluster create does) then holds an even share of the
// partitions on each master. Every process computes the same tags from the
// same Prefix and Partitions.
func partitionTags(prefix string, n int) []string {
	tags := make([]string, n)
	for i := range tags {
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n
		base := prefix + ":" + strconv.Itoa(i)
		tag := base
		for k := 0; ; k++ {
			if k > 0 {
				tag = base + "." + strconv.Itoa(k)
			}
			if s := int(keySlot(tag)); s >= lo && s < hi {
				break
			}
		}
		tags[i] = "{" + tag + "}"
	}
	return tags
}

// keySlot returns the hash slot of a key without braces: CRC16 (XMODEM)
// modulo 16384, as Redis Cluster computes it.
func keySlot(key string) uint16 {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}
