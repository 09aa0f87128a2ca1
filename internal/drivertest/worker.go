package drivertest

import (
	"bufio"
	"os/exec"
	"testing"
	"time"
)

// StartWorker starts cmd, a worker process of a multi-process or kill
// test, and waits up to 30 s for the first line of its standard output to
// be "ready". The lines it prints after that arrive on the returned
// channel (a line is dropped when nobody reads and 16 wait). The worker is
// killed at the test's cleanup unless it was waited for. cmd's Stdout
// must be nil; its Env and Stderr are the caller's.
func StartWorker(t testing.TB, cmd *exec.Cmd) <-chan string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan bool, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() { // drain until the process exits
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("worker %v did not start", cmd.Args)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %v not ready within 30s", cmd.Args)
	}
	return lines
}
