package bustest

import (
	"os"
	"testing"
)

// InCI reports whether the tests run under CI (the environment variable CI
// is "true"), where every test must run: a missing service or tool is a
// failure there, not a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOutsideCI skips the test with the formatted reason, or fails it with
// the same reason under CI. Driver tests call it when the server or tool
// they need is unavailable.
func SkipOutsideCI(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}
