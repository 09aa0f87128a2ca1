package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// selfCPU returns the user+system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100
// on every Linux this runs on.
const clockTick = 10 * time.Millisecond

// pidCPU returns the user+system CPU time used so far by the given processes.
func pidCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		if cpu, _, ok := statCPU("/proc/" + strconv.Itoa(pid) + "/stat"); ok {
			total += cpu
		}
	}
	return total
}

// statCPU reads a /proc/<pid>/stat file: the process's user+system CPU time
// and its command name.
func statCPU(path string) (time.Duration, string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces.
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 13 {
		return 0, "", false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", false
	}
	return time.Duration(utime+stime) * clockTick, s[open+1 : end], true
}

// serverCPU returns the user+system CPU time used so far by every process
// whose command name is one of names (the local database or broker
// servers), and whether any was found. Processes that exit between two
// samples make the difference smaller, never larger.
func serverCPU(names []string) (time.Duration, bool) {
	if len(names) == 0 {
		return 0, false
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var total time.Duration
	found := false
	for _, path := range stats {
		cpu, comm, ok := statCPU(path)
		if ok && slices.Contains(names, comm) {
			total += cpu
			found = true
		}
	}
	return total, found
}
