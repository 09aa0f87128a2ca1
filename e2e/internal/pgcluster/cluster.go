// Package pgcluster runs a throwaway PostgreSQL server for one test or one
// soak run: a cluster of its own in a directory the caller owns, on a free
// loopback port, with trust authentication. Fault tests restart or kill it
// instead of a server that other tests or the developer use.
//
// # Use
//
//	c, err := pgcluster.Start(ctx, t.TempDir())
//	if errors.Is(err, pgcluster.ErrUnavailable) { /* skip, or fail under CI */ }
//	defer c.Stop(ctx)
//	pool, err := pgxpool.New(ctx, c.URL())
//	c.Restart(ctx) // a fast shutdown and a start: clients see their connections end
//	c.Kill()       // SIGKILL to every server process, as a crash would
//	c.Restart(ctx) // crash recovery, then serving again
//
// # How it runs
//
// Start runs initdb from the installed server (the highest version under
// /usr/lib/postgresql/*/bin, else initdb on PATH; POSTBUS_TEST_PG_BIN names
// another directory), then the postgres binary itself as a child process in
// a process group of its own, so Kill reaches every server process at once.
// On Linux the server receives SIGQUIT (immediate shutdown) when the process
// that started it dies, so a crashed or timed-out test leaves no server
// behind. The Unix socket lives in the directory too; the server listens on
// 127.0.0.1 only and runs with fsync off: it holds test data only.
//
// PostgreSQL refuses to run as root. Run by root, the package runs initdb and
// the server as the "postgres" user: it hands the cluster's folders to that
// user and makes the directory and its parents up to os.TempDir() searchable
// (o+x, never readable) so that user can reach them.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
)

// ErrUnavailable is returned by Start when this machine cannot run a
// PostgreSQL server for tests: no initdb and postgres binaries, or, for
// root, no "postgres" user to run them as.
var ErrUnavailable = errors.New("pgcluster: cannot run a PostgreSQL server here")

// credential is the user the server runs as.
type credential struct{ uid, gid int }

// Cluster is one running throwaway PostgreSQL server. Its methods are safe
// for concurrent use.
type Cluster struct {
	bin, data, sock, logPath string
	port                     int
	cred                     *credential // nil: run as the current user

	mu  sync.Mutex
	srv *server // nil while stopped
}

// Start creates a cluster in dir (which must exist and should be empty,
// such as t.TempDir()) and starts its server, returning once it accepts
// connections. The caller must Stop it.
func Start(ctx context.Context, dir string) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c := &Cluster{
		bin: bin, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"), cred: cred,
	}
	if err := c.prepare(dir); err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if c.port, err = freePort(); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// URL returns the connection string of the cluster's "postgres" database
// as the superuser "postgres", over TCP.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Restart stops the server with a fast shutdown (open connections are
// ended, as by `pg_ctl restart -m fast`) when it runs, and starts it again
// on the same port and data, returning once it accepts connections. After
// Kill it starts the server, which first recovers from the crash.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}

// Stop shuts the server down (fast shutdown; immediate when ctx ends
// first) and waits for it to exit. Stopping a stopped cluster returns nil.
// The data stays in the directory until its owner removes it.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return nil
	}
	err := c.srv.stop(ctx)
	c.srv = nil
	return err
}

// Kill sends SIGKILL to every process of the server, as a crash of the
// database would, and waits for the server process to end. Restart brings
// it back; Stop after Kill returns nil.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return nil
	}
	err := c.srv.kill()
	c.srv = nil
	return err
}

// prepare creates the data and socket folders and, for root, hands them
// to the server's user.
func (c *Cluster) prepare(dir string) error {
	for _, d := range []string{c.data, c.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	log, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_ = log.Close()
	if c.cred == nil {
		return nil
	}
	if err := reachable(dir); err != nil {
		return err
	}
	for _, p := range []string{c.data, c.sock, c.logPath} {
		if err := os.Chown(p, c.cred.uid, c.cred.gid); err != nil {
			return fmt.Errorf("pgcluster: hand %s to the postgres user: %w", p, err)
		}
	}
	return nil
}

// initdb creates the cluster: trust authentication, superuser "postgres",
// no locale, no sync to disk.
func (c *Cluster) initdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "initdb"),
		"-D", c.data, "-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync")
	runAs(cmd, c.cred)
	cmd.Dir = c.data
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// args returns the server's command line.
func (c *Cluster) args() []string {
	return []string{
		"-D", c.data, "-p", strconv.Itoa(c.port), "-k", c.sock,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB", "-c", "max_connections=100",
	}
}
