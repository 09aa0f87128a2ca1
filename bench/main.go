package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1 // a message was missing, duplicated or early
	exitError   = 2 // the run could not be made
)

// run executes one bench run and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	if o.mdHeader {
		fmt.Fprintln(stdout, markdownHeader)
		return exitOK
	}
	if o.worker {
		if err := runWorker(ctx, o, stdin, stdout, stderr); err != nil {
			fmt.Fprintln(stderr, "bench worker:", err)
			return exitError
		}
		return exitOK
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		defer pprof.StopCPUProfile()
	}
	r, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	if err := r.writeJSON(stdout); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	if o.markdown {
		fmt.Fprintln(stdout, r.markdownRow())
	}
	if r.Failed() {
		fmt.Fprintf(stderr, "bench: %s: %d missing, %d duplicates, %d early, %d ID mismatches, %d unexpected\n",
			r.Workload, r.Missing, r.Duplicates, r.Early, r.IDMismatches, r.Unexpected)
		return exitInvalid
	}
	return exitOK
}

// measure opens the backends, runs the workload and returns its result.
func measure(ctx context.Context, o *options, stderr io.Writer) (*Result, error) {
	s, err := openStage(ctx, o, newRunID(), true, stderr)
	if err != nil {
		return nil, err
	}
	defer s.close()
	r := &Result{
		Workload: o.workload, Persistence: o.persistence, Transport: o.transport, N: o.n,
		GoVersion: runtime.Version(), LoadAvg: loadAverage(),
	}
	workloads := map[string]func(context.Context, *stage, *Result) error{
		"schedule": runSchedule, "schedule-batch": runScheduleBatch, "burst": runBurst, "spread": runSpread,
		"backlog": runBacklog, "throughput": runThroughput, "saga": runSagaWorkload,
		"recurring": runRecurring, "runtime-recurring": runRuntimeRecurring,
	}
	if err := workloads[o.workload](ctx, s, r); err != nil {
		return nil, fmt.Errorf("%s: %w", o.workload, err)
	}
	stray := s.stray.tally()
	r.Unexpected += stray.Unexpected
	r.Early += stray.Early
	if o.memprofile != "" {
		if err := writeHeapProfile(o.memprofile); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

// loadAverage returns the 1-minute load average, or 0 where unknown.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
