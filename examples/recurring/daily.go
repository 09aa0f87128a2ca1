package main

import (
	"fmt"
	"time"
)

// Daily is a schedule that fires once every day at a wall-clock time in a
// time zone, daylight saving time or not: on the night clocks go forward
// and the time does not exist, it fires at the same distance after the
// gap (02:30 becomes 03:30 in Berlin); on the night they go back and the
// time happens twice, it fires once. robfig/cron instead skips the day in
// the first case and fires twice in the second (see main_test.go).
type Daily struct {
	Hour, Minute int
	Location     *time.Location
}

// Next returns the first daily time after t.
func (d Daily) Next(t time.Time) time.Time {
	local := t.In(d.Location)
	for day := 0; day < 3; day++ {
		y, m, dd := local.AddDate(0, 0, day).Date()
		at := time.Date(y, m, dd, d.Hour, d.Minute, 0, 0, d.Location)
		if at.After(t) {
			return at
		}
	}
	return time.Time{} // not reached: a day always has the time, or its shifted stand-in
}

// String shows the schedule to operators.
func (d Daily) String() string {
	return fmt.Sprintf("daily at %02d:%02d %s", d.Hour, d.Minute, d.Location)
}
