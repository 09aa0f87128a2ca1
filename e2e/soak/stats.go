package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// printStats prints "stats <goroutines> <heap bytes>" on stdout every
// interval until ctx ends; the parent reads it with the worker's "ready".
func printStats(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Printf("stats %d %d\n", runtime.NumGoroutine(), ms.HeapInuse)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// parseStats reads a line of printStats.
func parseStats(line string) (goroutines, heap int64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "stats" {
		return 0, 0, false
	}
	g, err1 := strconv.ParseInt(f[1], 10, 64)
	h, err2 := strconv.ParseInt(f[2], 10, 64)
	return g, h, err1 == nil && err2 == nil
}

// residentKiB returns a process's resident set (VmRSS) in KiB.
func residentKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// openFiles counts a process's open file descriptors.
func openFiles(pid int) (int64, error) {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, fmt.Errorf("list fds of %d: %w", pid, err)
	}
	return int64(len(fds)), nil
}
