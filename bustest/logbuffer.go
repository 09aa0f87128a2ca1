package bustest

import (
	"strings"
	"sync"
)

// LogBuffer is a log destination that the bus's goroutines may write to
// at once, for tests that read what a bus logged:
//
//	var logs bustest.LogBuffer
//	logger := slog.New(slog.NewTextHandler(&logs, nil))
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
