package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// errExited reports a server process that ended before it was ready.
var errExited = errors.New("the server process exited")

// server is one run of the postgres process.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and was reaped
	err  error         // the exit status, set before done is closed
}

// start launches the server unless it runs and waits until it accepts
// connections. A server that exits before (a port taken since freePort, the
// shared memory of a killed server not yet released) is launched again
// until ctx ends.
func (c *Cluster) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		return nil
	}
	const attempts = 25
	for attempt := 1; ; attempt++ {
		s, err := c.launch()
		if err != nil {
			return err
		}
		err = s.waitReady(ctx, c.data)
		if err == nil {
			c.srv = s
			return nil
		}
		_ = s.kill()
		if errors.Is(err, errExited) && attempt < attempts {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(200 * time.Millisecond):
				continue
			}
		}
		return fmt.Errorf("pgcluster: start the server on port %d: %w\n%s", c.port, err, c.logTail())
	}
}

// launch starts the postgres process and a goroutine that reaps it.
func (c *Cluster) launch() (*server, error) {
	log, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	defer log.Close() // the child holds its own descriptor
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), c.args()...)
	cmd.Dir = c.data
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	s := &server{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal (Linux) follows the thread that started
		// the child: this goroutine keeps its thread until the server exits.
		lockThread()
		if err := startProcess(cmd, c.cred); err != nil {
			started <- err
			return
		}
		started <- nil
		s.err = cmd.Wait()
		close(s.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	return s, nil
}

// waitReady polls postmaster.pid until this process marks itself ready.
func (s *server) waitReady(ctx context.Context, data string) error {
	pid := strconv.Itoa(s.cmd.Process.Pid)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
		if err == nil {
			lines := strings.Split(string(b), "\n")
			// Line 1 is the postmaster's PID, line 8 its status.
			if len(lines) >= 8 && lines[0] == pid && strings.TrimSpace(lines[7]) == "ready" {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("%w (%v)", errExited, s.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stop asks for a fast shutdown (SIGINT) and waits; when ctx ends first, it
// kills the server.
func (s *server) stop(ctx context.Context) error {
	if err := interrupt(s.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: stop: %w", err)
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		_ = s.kill()
		return fmt.Errorf("pgcluster: stop: killed after %w", ctx.Err())
	}
}

// kill sends SIGKILL to the server's process group and waits for the
// postmaster to be reaped.
func (s *server) kill() error {
	err := killGroup(s.cmd.Process.Pid)
	<-s.done
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: kill: %w", err)
	}
	return nil
}

// logTail returns the end of the server log, for error messages.
func (c *Cluster) logTail() string {
	b, _ := os.ReadFile(c.logPath)
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "server log (" + c.logPath + "):\n" + string(b)
}

// findBin returns the directory holding initdb and postgres.
func findBin() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("POSTBUS_TEST_PG_BIN"); dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w: no initdb and postgres in POSTBUS_TEST_PG_BIN=%s", ErrUnavailable, dir)
	}
	// Debian and Ubuntu keep each major version apart: take the highest.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("%w: no initdb under /usr/lib/postgresql/*/bin or on PATH (set POSTBUS_TEST_PG_BIN)", ErrUnavailable)
}

// serverUser returns the credential to run the server with: nil for a
// user other than root, the "postgres" user for root.
func serverUser() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: PostgreSQL refuses root and there is no postgres user: %v", ErrUnavailable, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("%w: the postgres user's ids: %v", ErrUnavailable, err)
	}
	return &credential{uid: uid, gid: gid}, nil
}

// reachable lets other users search dir and its parents up to
// os.TempDir() (o+x: they can reach a known path, not list the folders).
// Outside os.TempDir() it changes nothing and reports a folder that
// blocks the way.
func reachable(dir string) error {
	tmp, err := filepath.Abs(os.TempDir())
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if p == tmp || !strings.HasPrefix(p, tmp+string(filepath.Separator)) {
				return fmt.Errorf("pgcluster: the postgres user cannot reach %s: %s is not searchable; use a directory under %s", dir, p, tmp)
			}
			if err := os.Chmod(p, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
		if p == tmp || filepath.Dir(p) == p {
			return nil
		}
	}
}
