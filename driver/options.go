package driver

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// Problem names an Options field that is invalid and says why. The checks
// below return nil for a valid field; First picks the first problem, and
// the driver turns it into its own typed error, whose fields are the same:
//
//	func (o Options) validate() error {
//		p := driver.First(
//			driver.AtLeast("AckWait", o.AckWait, time.Second),
//			driver.NotNegative("Prefetch", o.Prefetch),
//		)
//		if p == nil {
//			return nil
//		}
//		return &OptionsError{Field: p.Field, Reason: p.Reason}
//	}
type Problem struct {
	Field  string // the Options field, e.g. "AckWait"
	Reason string // e.g. "must be at least 1s"
}

// Error returns "<Field>: <Reason>".
func (p *Problem) Error() string { return p.Field + ": " + p.Reason }

// First returns the first non-nil problem, or nil.
func First(problems ...*Problem) *Problem {
	for _, p := range problems {
		if p != nil {
			return p
		}
	}
	return nil
}

// Check returns a problem with the reason when ok is false.
func Check(ok bool, field, reason string) *Problem {
	if ok {
		return nil
	}
	return &Problem{Field: field, Reason: reason}
}

// Number is what the numeric checks take: integers and durations.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float64
}

// NotNegative refuses v < 0: "must not be negative".
func NotNegative[T Number](field string, v T) *Problem {
	return Check(v >= 0, field, "must not be negative")
}

// Positive refuses v <= 0: "must be positive".
func Positive[T Number](field string, v T) *Problem {
	return Check(v > 0, field, "must be positive")
}

// AtLeast refuses v < least: "must be at least <least>" (a time.Duration
// is written as by its String method, "1s").
func AtLeast[T Number](field string, v, least T) *Problem {
	return Check(v >= least, field, "must be at least "+text(least))
}

// Between refuses v outside [lo, hi]: "must be between <lo> and <hi>".
func Between[T Number](field string, v, lo, hi T) *Problem {
	return Check(v >= lo && v <= hi, field, "must be between "+text(lo)+" and "+text(hi))
}

// WholeSeconds refuses a duration outside [lo, hi] or not a whole number
// of seconds: "must be whole seconds between <lo> and <hi>".
func WholeSeconds(field string, d, lo, hi time.Duration) *Problem {
	return Check(d >= lo && d <= hi && d%time.Second == 0, field, "must be whole seconds between "+text(lo)+" and "+text(hi))
}

func text[T Number](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return shortDuration(d)
	}
	return fmt.Sprint(v)
}

// shortDuration writes 12h rather than 12h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	for _, z := range []string{"0s", "0m"} {
		if len(s) > len(z)+1 && s[len(s)-len(z):] == z && (s[len(s)-len(z)-1] == 'm' || s[len(s)-len(z)-1] == 'h') {
			s = s[:len(s)-len(z)]
		}
	}
	return s
}

// Default sets *field to def when it holds the zero value.
func Default[T comparable](field *T, def T) {
	*field = cmp.Or(*field, def)
}

// Logger returns l, or slog.Default() when l is nil: the default of every
// driver's Options.Logger.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
