package bus

import "time"

// RecurringOccurrenceID returns the message ID of the occurrence of the
// recurring schedule name for tick: the ID every process that declares
// the schedule gives it (see Bus.AddRecurring). Operators' tools use it to
// find the occurrences stored for a schedule record's ticks
// (RecurringRecord.Ticks). Ticks compare at millisecond precision.
func RecurringOccurrenceID(name string, tick time.Time) string {
	return recurringID(name, tick, false)
}

// RecurringTriggerID returns the message ID of the occurrence an extra
// trigger of the recurring schedule name stores at time at (as
// Bus.TriggerRecurring does): distinct from the ID of a tick at the same
// time, and the same for a retried trigger at the same millisecond.
func RecurringTriggerID(name string, at time.Time) string {
	return recurringID(name, at, true)
}
