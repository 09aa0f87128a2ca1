package main

import (
	"maps"
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
	for _, cpu := range pidSnapshot(pids) {
		total += cpu
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

// cpuSnapshot is the CPU time used so far by each process of a set.
type cpuSnapshot map[int]time.Duration

// serverSnapshot samples every process whose command name is one of names
// (the local database or broker servers). It returns nil when names is
// empty or no such process runs.
func serverSnapshot(names []string) cpuSnapshot {
	if len(names) == 0 {
		return nil
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	snap := cpuSnapshot{}
	for _, path := range stats {
		cpu, comm, ok := statCPU(path)
		if !ok || !slices.Contains(names, comm) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err == nil {
			snap[pid] = cpu
		}
	}
	if len(snap) == 0 {
		return nil
	}
	return snap
}

// pidSnapshot samples the given processes; those gone are left out.
func pidSnapshot(pids []int) cpuSnapshot {
	snap := cpuSnapshot{}
	for _, pid := range pids {
		if cpu, _, ok := statCPU("/proc/" + strconv.Itoa(pid) + "/stat"); ok {
			snap[pid] = cpu
		}
	}
	return snap
}

// perProcess returns the CPU time, in milliseconds, each process of s used
// since before, in the order of their process IDs.
func (s cpuSnapshot) perProcess(before cpuSnapshot) []float64 {
	pids := slices.Sorted(maps.Keys(s))
	out := make([]float64, 0, len(pids))
	for _, pid := range pids {
		out = append(out, float64(cpuSnapshot{pid: s[pid]}.since(before))/1e6)
	}
	return out
}

// since returns the CPU time the processes used between before and s: the
// growth of those in both, and all of those that started in between.
// Processes that exited in between (short-lived database backends) are
// missing from s, so their last part is not counted.
func (s cpuSnapshot) since(before cpuSnapshot) time.Duration {
	var total time.Duration
	for pid, cpu := range s {
		if b, ok := before[pid]; ok && b <= cpu {
			total += cpu - b
		} else if !ok {
			total += cpu
		}
	}
	return total
}
