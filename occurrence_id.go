package bus

import "time"

// RecurringOccurrenceID returns the message ID of the occurrence of the
// recurring schedule name for tick: the ID every process that declares
// the schedule gives it (see Bus.AddRecurring). Operators' tools use it to
// find the occurrences stored for a schedule record's ticks
// (RecurringRecord.Ticks). Ticks compare at millisecond precision.
func RecurringOccurrenceID(name string, tick time.Time) string {
	return recurringID(name, tick, "")
}

// RecurringTriggerID returns a message ID for an extra occurrence of the
// recurring schedule name stored at time at: distinct from the ID of a
// tick at the same time, and the same for every call with the same
// millisecond. Bus.TriggerRecurring no longer uses it: each of its calls
// gets an ID of its own (RecurringTriggerKeyID with a key).
func RecurringTriggerID(name string, at time.Time) string {
	return recurringID(name, at, "trigger")
}

// RecurringTriggerKeyID returns the message ID of the occurrence that
// Bus.TriggerRecurring stores for the schedule name with TriggerKey(key):
// the same for every call with that key, so a retried trigger stores one
// occurrence.
func RecurringTriggerKeyID(name, key string) string {
	return recurringID(name, time.Time{}, "trigger\x00"+key)
}
