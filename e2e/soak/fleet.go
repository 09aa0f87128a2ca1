package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// fleet runs the worker processes: this program again, with -worker. It
// restarts a worker killed on purpose and one that exits unexpectedly
// (counted: that is a crash the soak did not cause).
type fleet struct {
	exe  string
	args func(slot int) []string
	dir  string
	log  *slog.Logger

	mu         sync.Mutex
	procs      []*proc
	closing    bool
	unexpected []string // "worker 2 (pid 123): exit status 1"
}

// maxUnexpected bounds the restarts of workers that exited on their own.
const maxUnexpected = 10

// proc is one worker process.
type proc struct {
	slot int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error         // the Wait result, set before done closes
	// killed is set before the soak signals the process to end, so its
	// exit is not counted as unexpected.
	killed bool
	// The last "stats" line the worker printed (-stats).
	mu         sync.Mutex
	goroutines int64
	heap       int64
	hasStats   bool
}

// stats returns the worker's last goroutine count and heap size.
func (p *proc) stats() (goroutines, heap int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.goroutines, p.heap, p.hasStats
}

// pid returns the process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// start starts the worker of slot and waits until it reports ready.
func (f *fleet) start(ctx context.Context, slot int) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(f.dir, fmt.Sprintf("worker-%d.log", slot)),
		os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("worker log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(f.exe, f.args(slot)...)
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("worker stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %d: %w", slot, err)
	}
	p := &proc{slot: slot, cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if sc.Text() == "ready" && !signalled {
				close(ready)
				signalled = true
			}
			if g, h, ok := parseStats(sc.Text()); ok {
				p.mu.Lock()
				p.goroutines, p.heap, p.hasStats = g, h, true
				p.mu.Unlock()
			}
		}
		p.err = cmd.Wait() // after stdout is drained, as Wait requires
		close(p.done)
		f.exited(p)
	}()
	f.mu.Lock()
	for len(f.procs) <= slot {
		f.procs = append(f.procs, nil)
	}
	f.procs[slot] = p
	f.mu.Unlock()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("worker %d exited before it was ready: %v (see %s)", slot, p.err, logf.Name())
	case <-ctx.Done():
		return nil, fmt.Errorf("worker %d not ready: %w", slot, ctx.Err())
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("worker %d not ready after a minute (see %s)", slot, logf.Name())
	}
}

// exited records an unexpected exit and restarts the slot.
func (f *fleet) exited(p *proc) {
	f.mu.Lock()
	if p.killed || f.closing {
		f.mu.Unlock()
		return
	}
	msg := fmt.Sprintf("worker %d (pid %d): %v", p.slot, p.pid(), p.err)
	f.unexpected = append(f.unexpected, msg)
	exits := len(f.unexpected)
	f.mu.Unlock()
	if exits > maxUnexpected {
		f.log.Error("worker exited unexpectedly; too many exits, not restarting it", slog.String("worker", msg))
		return
	}
	f.log.Warn("worker exited unexpectedly; restarting it", slog.String("worker", msg))
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := f.start(ctx, p.slot); err != nil {
		f.log.Error("cannot restart worker", slog.Int("slot", p.slot), slog.Any("error", err))
	}
}

// current returns the running process of slot.
func (f *fleet) current(slot int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[slot]
}

// running returns the worker processes that have not exited.
func (f *fleet) running() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*proc
	for _, p := range f.procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

// size is the number of slots.
func (f *fleet) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.procs)
}

// kill sends SIGKILL to the worker of slot, waits until it is reaped and
// returns its pid and the time of the signal. The caller restarts the slot.
func (f *fleet) kill(slot int) (pid int, at time.Time, err error) {
	p := f.current(slot)
	f.mu.Lock()
	p.killed = true
	f.mu.Unlock()
	at = time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, at, fmt.Errorf("kill worker %d: %w", slot, err)
	}
	<-p.done
	return p.pid(), at, nil
}

// shutdown sends SIGTERM to every worker and waits for them to stop, up to
// timeout; a worker still running then is killed.
func (f *fleet) shutdown(timeout time.Duration) {
	f.mu.Lock()
	f.closing = true
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	deadline := time.After(timeout)
	for _, p := range procs {
		if p == nil {
			continue
		}
		_ = resume(p.cmd.Process) // a stopped process cannot handle SIGTERM
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			if p.err != nil {
				f.log.Warn("worker stopped with an error", slog.Int("slot", p.slot), slog.Any("error", p.err))
			}
		case <-deadline:
			f.log.Warn("worker did not stop in time; killing it", slog.Int("slot", p.slot))
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// unexpectedExits returns the unexpected exits so far.
func (f *fleet) unexpectedExits() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.unexpected...)
}
