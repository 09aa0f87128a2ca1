package mongodb_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
)

// uriEnv names a real MongoDB to test against instead of FerretDB.
const uriEnv = "POSTBUS_TEST_MONGODB_URI"

// testDatabase holds every test's collections; each test uses collections
// with a random suffix and drops them.
const testDatabase = "postbus_test"

// testEnv is what TestMain set up for the tests: the server's URI and a
// client shared by tests that need no client of their own.
var testEnv struct {
	uri    string
	client *mongo.Client
}

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	uri := os.Getenv(uriEnv)
	var srv *testServer
	if uri == "" {
		var err error
		if srv, err = startTestServer(); err != nil {
			return unavailable(fmt.Errorf("FerretDB test server: %w", err))
		}
		uri = srv.uri
		// The Example reads the URI from the environment, as a user would.
		if err := os.Setenv(uriEnv, uri); err != nil {
			srv.stop()
			return unavailable(err)
		}
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = client.Ping(ctx, nil)
		cancel()
		if err != nil {
			_ = client.Disconnect(context.Background())
		}
	}
	if err != nil {
		srv.stop()
		return unavailable(fmt.Errorf("MongoDB at %s: %w", uri, err))
	}
	testEnv.uri, testEnv.client = uri, client

	code := m.Run()

	_ = client.Disconnect(context.Background())
	srv.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutines leaked:", err)
			return 1
		}
	}
	return code
}

// unavailable skips the package loudly, or fails it under CI=true.
func unavailable(err error) int {
	if bustest.InCI() {
		fmt.Fprintln(os.Stderr, "FAIL: no MongoDB for the tests:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "SKIP: no MongoDB for the tests (set %s to use a real one): %v\n", uriEnv, err)
	return 0
}

// testServer is the FerretDB test server process, started by TestMain.
type testServer struct {
	uri    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	dir    string
	stderr *lockedBuffer
}

// Test server settings. FerretDB's postgresql handler is the default: its
// SQLite handler cannot use its _id index for updates and deletes (it
// filters on a different expression than the index holds), so each update
// statement scans the collection and the large-batch cases take minutes.
const (
	handlerEnv = "POSTBUS_TEST_FERRETDB_HANDLER"        // postgresql (default) or sqlite
	pgURLEnv   = "POSTBUS_TEST_FERRETDB_POSTGRESQL_URL" // server URL without a database name
	defaultPG  = "postgres://root@127.0.0.1:5432/"
)

// startTestServer builds the testserver program (cached by the hash of its
// sources and the Go version) and starts it on a free loopback port: on the
// local PostgreSQL in a database of its own, created and dropped by the test
// server, or with SQLite in a fresh temporary folder.
func startTestServer() (*testServer, error) {
	bin, err := buildTestServer()
	if err != nil {
		return nil, err
	}
	handler := os.Getenv(handlerEnv)
	if handler == "" {
		handler = "postgresql"
	}
	s, err := runTestServer(bin, handler)
	if err != nil && os.Getenv(handlerEnv) == "" {
		fmt.Fprintf(os.Stderr, "FerretDB on PostgreSQL did not start (%v); falling back to its slow SQLite handler\n", err)
		s, err = runTestServer(bin, "sqlite")
	}
	return s, err
}

func runTestServer(bin, handler string) (*testServer, error) {
	dir, err := os.MkdirTemp("", "postbus-ferretdb-")
	if err != nil {
		return nil, err
	}
	s := &testServer{dir: dir, stderr: &lockedBuffer{}}
	args := []string{"-listen", "127.0.0.1:0", "-handler", handler, "-dir", dir}
	if handler == "postgresql" {
		base := os.Getenv(pgURLEnv)
		if base == "" {
			base = defaultPG
		}
		db := fmt.Sprintf("postbus_ferretdb_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
		pgURL, err := serverDatabaseURL(base, db)
		if err != nil {
			return nil, err
		}
		args = append(args, "-postgresql-url", pgURL, "-own-database")
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stderr = s.stderr
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r) // until the process exits
	}()
	select {
	case s.uri = <-lines:
	case <-time.After(time.Minute):
	}
	if !strings.HasPrefix(s.uri, "mongodb://") {
		s.stop()
		return nil, fmt.Errorf("%s test server printed no URI: %q; stderr: %s", handler, s.uri, s.stderr.String())
	}
	fmt.Fprintf(os.Stderr, "testing against FerretDB (%s handler) at %s\n", handler, s.uri)
	return s, nil
}

// serverDatabaseURL returns the URL of database db on the PostgreSQL server
// at base, for FerretDB. Its sessions commit without waiting for the WAL
// flush (synchronous_commit=off, a setting of those sessions only): FerretDB
// v1 commits every document an update changes on its own, and waiting for
// each flush made a claim of 1,000 documents take 3 to 5 s instead of 1.5 to
// 2 s on a loaded machine. A crash of the database server could lose the
// last commits of this throwaway database; the tests never cause one.
func serverDatabaseURL(base, db string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%s: %w", pgURLEnv, err)
	}
	u.Path = "/" + db
	q := u.Query()
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// stop closes the server's standard input, which makes it exit, and kills
// it if it has not exited within ten seconds.
func (s *testServer) stop() {
	if s == nil {
		return
	}
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(s.dir)
}

func buildTestServer() (string, error) {
	src, err := filepath.Abs("testserver")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintln(h, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, f := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "postbus", "ferretdb-testserver-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", src, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// lockedBuffer collects the server's stderr for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // keep the start; enough to diagnose
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
