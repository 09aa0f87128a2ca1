package driver

// Ordered tracks settlement in position order, for brokers that
// acknowledge a position rather than a message: a Kafka consumer commits
// the offset after the highest record of a partition below which every
// record is settled. Handlings may finish in any order; Settle reports
// how far the contiguous settled prefix reaches.
//
// An Ordered is not safe for concurrent use: the receive loop guards it
// with the lock that guards its partition.
type Ordered[T any] struct {
	pending []*Position[T]
}

// Position is one message's place in an Ordered.
type Position[T any] struct {
	// Value is what Add was given (a record, an offset).
	Value   T
	settled bool
}

// Add appends v, the next message in order, and returns its position.
func (o *Ordered[T]) Add(v T) *Position[T] {
	p := &Position[T]{Value: v}
	o.pending = append(o.pending, p)
	return p
}

// Settle marks p settled. It returns the last value of the settled prefix
// it removed and true, or the zero value and false when the prefix did
// not grow (an earlier message is still unsettled, or p was settled
// already).
func (o *Ordered[T]) Settle(p *Position[T]) (last T, advanced bool) {
	if p.settled {
		return last, false
	}
	p.settled = true
	i := 0
	for ; i < len(o.pending) && o.pending[i].settled; i++ {
		last = o.pending[i].Value
	}
	if i == 0 {
		return last, false
	}
	clear(o.pending[:i])
	o.pending = o.pending[i:]
	return last, true
}

// Len returns how many messages were added and are not yet in the settled
// prefix.
func (o *Ordered[T]) Len() int { return len(o.pending) }

// Unsettled returns the values not settled yet, in order.
func (o *Ordered[T]) Unsettled() []T {
	var out []T
	for _, p := range o.pending {
		if !p.settled {
			out = append(out, p.Value)
		}
	}
	return out
}
