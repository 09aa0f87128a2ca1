package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// receipt is the line a worker process writes for each message it handled.
type receipt struct {
	Ready bool   `json:"ready,omitempty"`
	Seq   int64  `json:"seq"`
	ID    string `json:"id,omitempty"`
	At    int64  `json:"at,omitempty"`   // Unix nanoseconds
	Late  int64  `json:"late,omitempty"` // nanoseconds; negative: early
	// SagaConflicts, on a worker's last line, is its bus's
	// Metrics().SagaConflicts.
	SagaConflicts uint64 `json:"saga_conflicts,omitempty"`
}

// fleet is the worker processes of a run started with -instances.
type fleet struct {
	cmds    []*exec.Cmd
	stdins  []io.WriteCloser
	readers sync.WaitGroup
	once    sync.Once
	err     error
}

const (
	workerStartTimeout = 30 * time.Second
	workerStopTimeout  = 30 * time.Second
)

// startWorkers re-executes this binary -instances times as workers on the
// stage's store and transport, and feeds their receipts into the stage's
// current tracker. It returns once every worker's bus has started.
func startWorkers(ctx context.Context, s *stage) (*fleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	f := &fleet{}
	ready := make(chan error, s.o.instances)
	for range s.o.instances {
		cmd := exec.CommandContext(ctx, exe, s.workerArgs()...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			f.stop()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			f.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			f.stop()
			return nil, fmt.Errorf("start worker: %w", err)
		}
		f.cmds = append(f.cmds, cmd)
		f.stdins = append(f.stdins, stdin)
		f.readers.Go(func() { s.readReceipts(stdout, ready) })
	}
	timeout := time.After(workerStartTimeout)
	for range s.o.instances {
		select {
		case err := <-ready:
			if err != nil {
				f.stop()
				return nil, err
			}
		case <-timeout:
			f.stop()
			return nil, errors.New("workers did not start within 30s")
		}
	}
	s.fleet = f
	return f, nil
}

// workerArgs are the flags a worker needs to join this run.
func (s *stage) workerArgs() []string {
	o := s.o
	return []string{
		"-worker", "-run", s.run, "-workload", o.workload,
		"-persistence", o.persistence, "-transport", o.transport,
		"-postgres-url", o.postgresURL, "-rabbitmq-url", o.rabbitmqURL, "-nats-url", o.natsURL,
		"-sqlite-path", o.sqlitePath, "-mongodb-uri", o.mongodbURI, "-handlers", strconv.Itoa(o.handlers),
		"-dispatch-batch", strconv.Itoa(o.dispatch.batch), "-dispatch-concurrency", strconv.Itoa(o.dispatch.concurrency),
		"-dispatch-poll", o.dispatch.poll.String(), "-v=" + strconv.FormatBool(o.verbose),
		"-outbox=" + strconv.FormatBool(o.outbox), "-saga-messages", strconv.Itoa(o.sagaMessages),
	}
}

// readReceipts reads one worker's lines: first {"ready":true}, then one
// receipt per handled message.
func (s *stage) readReceipts(r io.Reader, ready chan<- error) {
	sc := bufio.NewScanner(r)
	started := false
	for sc.Scan() {
		var rc receipt
		if err := json.Unmarshal(sc.Bytes(), &rc); err != nil {
			fmt.Fprintf(os.Stderr, "bench: worker wrote %q: %v\n", sc.Text(), err)
			continue
		}
		if rc.SagaConflicts > 0 {
			s.sagaConflicts.Add(rc.SagaConflicts)
			continue
		}
		if rc.Ready {
			started = true
			ready <- nil
			continue
		}
		s.tracker().record(rc.Seq, rc.ID, time.Unix(0, rc.At), time.Duration(rc.Late))
	}
	if !started {
		ready <- errors.New("a worker exited before it started; see its errors above")
	}
}

// stop closes the workers' standard input, which tells them to stop their
// bus and exit, and waits for them (killing any that hang).
func (f *fleet) stop() error {
	f.once.Do(func() {
		for _, in := range f.stdins {
			_ = in.Close()
		}
		done := make(chan struct{})
		go func() { f.readers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(workerStopTimeout):
			f.err = errors.New("workers did not stop within 30s; killed")
		}
		for _, cmd := range f.cmds {
			if f.err != nil {
				_ = cmd.Process.Kill()
			}
			if err := cmd.Wait(); err != nil && f.err == nil {
				f.err = fmt.Errorf("worker: %w", err)
			}
		}
	})
	return f.err
}

// pids returns the workers' process IDs.
func (f *fleet) pids() []int {
	out := make([]int, 0, len(f.cmds))
	for _, c := range f.cmds {
		out = append(out, c.Process.Pid)
	}
	return out
}

// runWorker is the worker side of -instances: a bus on the run's store and
// transport whose handler reports each receipt as a JSON line, until its
// standard input closes.
func runWorker(ctx context.Context, o *options, stdin io.Reader, stdout, stderr io.Writer) error {
	s, err := openStage(ctx, o, o.run, false, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	out := bufio.NewWriterSize(stdout, 64<<10)
	var mu sync.Mutex
	emit := func(rc receipt) {
		line, _ := json.Marshal(rc)
		mu.Lock()
		_, _ = out.Write(append(line, '\n'))
		mu.Unlock()
	}
	flush := func() {
		mu.Lock()
		_ = out.Flush()
		mu.Unlock()
	}
	b, err := s.newBus(false, o.handlers, func(seq int64, id string, at time.Time, late time.Duration) {
		emit(receipt{Seq: seq, ID: id, At: at.UnixNano(), Late: int64(late)})
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	emit(receipt{Ready: true})
	flush()
	stopFlushing := make(chan struct{})
	var flusher sync.WaitGroup
	flusher.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				flush()
			case <-stopFlushing:
				return
			}
		}
	})
	_, _ = io.Copy(io.Discard, stdin) // the parent closes it to stop us
	err = b.Stop(context.WithoutCancel(ctx))
	if c := b.Metrics().SagaConflicts; c > 0 {
		emit(receipt{SagaConflicts: c})
	}
	close(stopFlushing)
	flusher.Wait()
	flush()
	return err
}
