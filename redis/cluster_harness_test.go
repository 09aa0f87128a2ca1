package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus/bustest"
)

// testCluster is a Redis Cluster of 3 masters and 3 replicas that the tests
// start in a temporary folder on free loopback ports (redis-server with
// --cluster-enabled, then redis-cli --cluster create), once for the whole
// package, and that TestMain stops. Only redis-server and redis-cli need
// to be installed.
type testCluster struct {
	dir   string
	addrs []string
	nodes map[string]*exec.Cmd
}

var (
	clusterOnce sync.Once
	theCluster  *testCluster
	clusterErr  error
)

// startedCluster returns the test cluster, starting it on first use, or
// skips the test when redis-server is not installed (fails under CI=true).
func startedCluster(t testing.TB) *testCluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = startCluster() })
	if clusterErr != nil {
		if errors.Is(clusterErr, exec.ErrNotFound) {
			bustest.SkipOutsideCI(t, "Redis Cluster tests need redis-server and redis-cli: %v", clusterErr)
		}
		t.Fatalf("start the test cluster: %v", clusterErr)
	}
	return theCluster
}

// connectCluster returns a client of the test cluster, closed at cleanup.
func connectCluster(t testing.TB) *goredis.ClusterClient {
	t.Helper()
	c := startedCluster(t)
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.addrs, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// stopCluster stops the shared test cluster, if one was started.
func stopCluster() {
	if theCluster != nil {
		theCluster.stop()
		theCluster = nil
	}
}

// stop kills the cluster's nodes and deletes its folder.
func (c *testCluster) stop() {
	for _, cmd := range c.nodes {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	_ = os.RemoveAll(c.dir)
}

const clusterNodes = 6

func startCluster() (*testCluster, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "postbus-redis-cluster-")
	if err != nil {
		return nil, err
	}
	c := &testCluster{dir: dir, nodes: map[string]*exec.Cmd{}}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	ports, err := freePorts(clusterNodes)
	if err != nil {
		return nil, err
	}
	for _, port := range ports {
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if err := c.startNode(addr); err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, addr := range c.addrs {
		if err := waitFor(ctx, addr, func(rdb *goredis.Client) error { return rdb.Ping(ctx).Err() }); err != nil {
			return nil, fmt.Errorf("node %s did not start: %w", addr, err)
		}
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startNode starts one cluster node on addr, logging to <dir>/<port>.log.
func (c *testCluster) startNode(addr string) error {
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	log, err := os.Create(filepath.Join(c.dir, port+".log"))
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+port+".conf", "--cluster-node-timeout", "2000",
		"--dir", c.dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = log, log
	// The nodes die with the test process, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server on %s: %w", addr, err)
	}
	c.nodes[addr] = cmd
	return nil
}

// waitHealthy waits until every node reports cluster_state:ok and every
// master has a replica attached.
func (c *testCluster) waitHealthy(ctx context.Context) error {
	for _, addr := range c.addrs {
		err := waitFor(ctx, addr, func(rdb *goredis.Client) error {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster_state is not ok")
			}
			repl, err := rdb.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:master") && !strings.Contains(repl, "connected_slaves:1") {
				return errors.New("master without its replica")
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return errors.New("replica not linked to its master")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cluster not healthy at %s: %w", addr, err)
		}
	}
	return nil
}

// waitFor calls check on a client of addr until it returns nil or ctx ends.
func waitFor(ctx context.Context, addr string, check func(*goredis.Client) error) error {
	rdb := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	for {
		err := check(rdb)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n loopback ports that are free, each with its cluster
// bus port (port + 10000) free too.
func freePorts(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n && tries < 100*n; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found %d free port pairs, want %d", len(ports), n)
	}
	return ports, nil
}
