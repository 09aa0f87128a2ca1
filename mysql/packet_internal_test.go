package mysql

import (
	"bytes"
	"slices"
	"testing"

	"github.com/postbus/bus"
)

// TestChunkEndKeepsStatementsWithinThePacketLimit: rows that fit one by
// one but not together are split into statements that each fit, however
// small the server's max_allowed_packet; one row always makes progress.
func TestChunkEndKeepsStatementsWithinThePacketLimit(t *testing.T) {
	t.Parallel()
	rows := make([]bus.OutgoingMessage, 5)
	for i := range rows {
		rows[i] = bus.OutgoingMessage{ID: "r", Envelope: bytes.Repeat([]byte("x"), 1000)}
	}
	one := worstRowSize(&rows[0])
	for _, c := range []struct {
		budget  int
		bounded bool
		want    []int
	}{
		{budget: 2*one + 1, bounded: true, want: []int{2, 4, 5}},
		{budget: one, bounded: true, want: []int{1, 2, 3, 4, 5}},
		{budget: 1, bounded: true, want: []int{1, 2, 3, 4, 5}},
		{budget: 1, bounded: false, want: []int{5}},
	} {
		var got []int
		for start := 0; start < len(rows); {
			start = chunkEnd(rows, start, c.budget, c.bounded)
			got = append(got, start)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("budget %d bounded %v: statement ends %v, want %v", c.budget, c.bounded, got, c.want)
		}
	}
}
