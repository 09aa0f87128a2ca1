package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// claimerEnv names the database file a re-executed test binary claims from.
const claimerEnv = "POSTBUS_SQLITE_TEST_CLAIMER"

// claimerTransport is the transport identity the claimers claim for.
const claimerTransport = "multiprocess"

// TestMultiProcessClaims runs several OS processes (this test binary,
// re-executed) claiming from one file at once: every row must be claimed by
// exactly one of them.
func TestMultiProcessClaims(t *testing.T) {
	t.Parallel()
	const rowCount, procs = 6000, 3
	path := filepath.Join(t.TempDir(), "shared.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	msgs := make([]bus.OutgoingMessage, rowCount)
	for i := range msgs {
		id := fmt.Sprintf("mp-%05d", i)
		env := bus.MarshalEnvelope(&bus.Envelope{ID: id, Type: "mp", Kind: bus.KindCommand})
		msgs[i] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Envelope: env, DueAt: now.Add(-time.Duration(i) * time.Microsecond), Transport: claimerTransport}
	}
	if err := p.StoreOutgoing(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
		ids   []string
	}
	children := make([]*child, procs)
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), claimerEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		children[i] = c
		// Each child says "ready" once it has the file open.
		if !c.out.Scan() || c.out.Text() != "ready" {
			t.Fatalf("child %d did not get ready: %q %v", i, c.out.Text(), c.out.Err())
		}
	}
	// Release all of them at once, then collect what each claimed.
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range children {
		wg.Go(func() {
			for c.out.Scan() {
				c.ids = append(c.ids, c.out.Text())
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	busy := 0
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		t.Logf("process %d claimed %d rows", i, len(c.ids))
		if len(c.ids) > 0 {
			busy++
		}
		for _, id := range c.ids {
			seen[id]++
		}
	}
	if len(seen) != rowCount {
		t.Errorf("claimed %d distinct rows, want %d", len(seen), rowCount)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %s claimed %d times", id, n)
		}
	}
	if busy < 2 {
		t.Errorf("only %d of %d processes claimed rows; the test did not exercise concurrency", busy, procs)
	}
	if n, err := p.Len(ctx); err != nil || n != 0 {
		t.Errorf("rows left = %d, %v; want 0", n, err)
	}
}

// runClaimerIfAsked is the child side of TestMultiProcessClaims. It reports
// whether this process was a child (and then it has exited already).
func runClaimerIfAsked() bool {
	path := os.Getenv(claimerEnv)
	if path == "" {
		return false
	}
	if err := claimAll(path); err != nil {
		fmt.Fprintln(os.Stderr, "claimer:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func claimAll(path string) error {
	p, err := sqlite.Open(path, sqlite.Options{BusyTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx := context.Background()
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "ready")
	if err := w.Flush(); err != nil {
		return err
	}
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("waiting for go: %q %v", line, err)
	}
	for {
		got, err := p.ClaimDueOutgoing(ctx, claimerTransport, time.Now(), 20, time.Hour)
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return w.Flush()
		}
		claims := make([]bus.Claim, len(got))
		for i := range got {
			claims[i] = got[i].Claim()
			fmt.Fprintln(w, got[i].ID)
		}
		if n, err := p.DeleteOutgoing(ctx, claims); err != nil || n != len(got) {
			return fmt.Errorf("deleted %d of %d claimed rows: %v", n, len(got), err)
		}
		// A dispatcher sends what it claimed before it claims again. The
		// pause stands for that: SQLite's busy handler retries by sleeping,
		// so a process that claims again at once can take the write lock
		// round after round while the others sleep, and on a loaded
		// machine one process then claimed all 6,000 rows.
		time.Sleep(5 * time.Millisecond)
	}
}
