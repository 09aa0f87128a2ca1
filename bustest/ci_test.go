package bustest_test

import (
	"testing"

	"github.com/postbus/bus/bustest"
)

// recordingTB records the first of Fatalf and Skipf called on it.
type recordingTB struct {
	testing.TB
	first string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(string, ...any) {
	if r.first == "" {
		r.first = "fatal"
	}
}
func (r *recordingTB) Skipf(string, ...any) {
	if r.first == "" {
		r.first = "skip"
	}
}

func TestSkipOutsideCIFailsUnderCI(t *testing.T) {
	for env, want := range map[string]string{"true": "fatal", "": "skip", "false": "skip"} {
		t.Setenv("CI", env)
		if got := bustest.InCI(); got != (want == "fatal") {
			t.Errorf("CI=%q: InCI() = %v", env, got)
		}
		r := &recordingTB{TB: t}
		bustest.SkipOutsideCI(r, "no server")
		if r.first != want {
			t.Errorf("CI=%q: SkipOutsideCI did %q first, want %q", env, r.first, want)
		}
	}
}
