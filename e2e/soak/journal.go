package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// What a journal line says happened to a message in a worker process.
const (
	// eventHandled: the handler succeeded; written before it returns, so a
	// process killed after the write but before the acknowledgement leaves
	// the line behind and the broker delivers the message again.
	eventHandled = 'h'
	// eventHandOver: the dispatcher is about to hand the message to the
	// transport; from the claim until its delete this process holds the row.
	eventHandOver = 'd'
	// eventParked: the message was sent to the error or dead-letter queue.
	eventParked = 'e'
)

// event is one journal line: message id met event kind in process pid at
// time at.
type event struct {
	kind byte
	id   string
	pid  int
	at   time.Time
}

// journal appends a worker's events to a file of its own. Each event is one
// write(2) on a file opened with O_APPEND, so concurrent handlers never
// interleave lines and an event survives a SIGKILL of the process the
// moment write returns (it is in the page cache; no fsync is needed unless
// the machine itself crashes).
type journal struct {
	f   *os.File
	pid int
}

// openJournal creates the journal of this process in dir.
func openJournal(dir string, slot int) (*journal, error) {
	pid := os.Getpid()
	name := filepath.Join(dir, fmt.Sprintf("journal-%d-%d.log", slot, pid))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &journal{f: f, pid: pid}, nil
}

// write appends one event stamped with the current time.
func (j *journal) write(kind byte, id string) error {
	line := fmt.Appendf(nil, "%c %d %d %s\n", kind, time.Now().UnixNano(), j.pid, id)
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("journal %s: %w", id, err)
	}
	return nil
}

// Close closes the file.
func (j *journal) Close() error { return j.f.Close() }

// readJournals reads every journal in dir. A line cut short (a process
// killed in the middle of a write, which a single small write makes
// unlikely) is counted in torn and skipped.
func readJournals(dir string) (events []event, torn int, err error) {
	names, err := filepath.Glob(filepath.Join(dir, "journal-*.log"))
	if err != nil {
		return nil, 0, fmt.Errorf("list journals: %w", err)
	}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, fmt.Errorf("read journal: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			ev, ok := parseEvent(sc.Text())
			if !ok {
				torn++
				continue
			}
			events = append(events, ev)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("read journal %s: %w", name, err)
		}
	}
	return events, torn, nil
}

func parseEvent(line string) (event, bool) {
	f := strings.Fields(line)
	if len(f) != 4 || len(f[0]) != 1 || !strings.ContainsRune("hde", rune(f[0][0])) {
		return event{}, false
	}
	ns, err1 := strconv.ParseInt(f[1], 10, 64)
	pid, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return event{}, false
	}
	return event{kind: f[0][0], id: f[3], pid: pid, at: time.Unix(0, ns)}, true
}
