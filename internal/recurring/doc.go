// Package recurring plans the steps of recurring schedules: which ticks a
// step stores, which stored ones it cancels, and what the schedule's
// record says afterwards. Planning is a pure function of the record's
// state, the time of the step and the schedule's parameters: it reads no
// clock, does no I/O and starts no goroutine, so every case (missed, late,
// paused, superseded, the policies) is tested as a table. The bus stores
// and applies what it returns.
package recurring
