package driver

import (
	"context"
	"time"
)

// Sleep waits for d or the end of ctx, and reports whether ctx is still
// live: the pause of a receive loop between attempts after a failed read.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
