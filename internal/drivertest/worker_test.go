package drivertest_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/postbus/bus/internal/drivertest"
)

func TestStartWorkerWaitsForReadyThenPassesLines(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo ready; echo one; echo two; sleep 60")
	lines := drivertest.StartWorker(t, cmd)
	for _, want := range []string{"one", "two"} {
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("line %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %q did not arrive", want)
		}
	}
	if cmd.ProcessState != nil {
		t.Fatal("the worker exited before the test ended")
	}
	// A subtest's cleanup kills its worker: the sleep ends early.
	var sub *exec.Cmd
	t.Run("killed at cleanup", func(t *testing.T) {
		sub = exec.Command("sh", "-c", "echo ready; exec sleep 60")
		drivertest.StartWorker(t, sub)
	})
	if sub.ProcessState == nil || sub.ProcessState.Success() {
		t.Errorf("after the subtest's cleanup the worker's state is %v, want killed", sub.ProcessState)
	}
}
