package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// benchCluster is a throwaway Redis Cluster of masters only, started in a
// temporary folder on free loopback ports for one run.
type benchCluster struct {
	dir   string
	addrs []string
	cmds  []*exec.Cmd
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// startBenchCluster starts masters redis-server nodes with cluster mode on,
// gives each an equal range of the slots (CLUSTER ADDSLOTSRANGE, Redis 7),
// joins them (CLUSTER MEET) and waits until every node reports
// cluster_state:ok. One master is a cluster too: redis-cli --cluster create
// wants three.
func startBenchCluster(ctx context.Context, masters int) (c *benchCluster, err error) {
	if masters < 1 {
		return nil, fmt.Errorf("-redis-masters must be positive, got %d", masters)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-cluster needs redis-server: %w", err)
	}
	dir, err := os.MkdirTemp("", "postbus-bench-cluster-")
	if err != nil {
		return nil, err
	}
	c = &benchCluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ports, err := freeClusterPorts(masters)
	if err != nil {
		return nil, err
	}
	for _, port := range ports {
		if err := c.startNode(port); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	clients := make([]*goredis.Client, len(c.addrs))
	for i, addr := range c.addrs {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
		defer func() { _ = clients[i].Close() }()
	}
	for i, rdb := range clients {
		if err := retry(ctx, func() error { return rdb.Ping(ctx).Err() }); err != nil {
			return nil, fmt.Errorf("node %s did not start: %w", c.addrs[i], err)
		}
	}
	for i, rdb := range clients {
		first, last := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", c.addrs[i], err)
		}
	}
	for _, port := range ports[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(port)).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET: %w", err)
		}
	}
	for i, rdb := range clients {
		err := retry(ctx, func() error {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if v, _ := infoField(info, "cluster_state"); v != "ok" {
				return errors.New("cluster_state is not ok")
			}
			if v, _ := infoField(info, "cluster_known_nodes"); v != strconv.Itoa(masters) {
				return fmt.Errorf("knows %s nodes", v)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cluster not ready at %s: %w", c.addrs[i], err)
		}
	}
	return c, nil
}

// startNode starts one node on port, logging to <dir>/<port>.log.
func (c *benchCluster) startNode(port int) error {
	p := strconv.Itoa(port)
	log, err := os.Create(filepath.Join(c.dir, p+".log"))
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command("redis-server", "--port", p, "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf", "--cluster-node-timeout", "5000",
		"--dir", c.dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = log, log
	// The nodes die with the bench, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server on port %s: %w", p, err)
	}
	c.cmds = append(c.cmds, cmd)
	c.addrs = append(c.addrs, "127.0.0.1:"+p)
	return nil
}

// stop kills the nodes and deletes the folder.
func (c *benchCluster) stop() {
	for _, cmd := range c.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	_ = os.RemoveAll(c.dir)
}

// retry calls f every 100 ms until it returns nil or ctx ends.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
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

// freeClusterPorts returns n free loopback ports whose cluster bus port
// (port + 10000) is free too.
func freeClusterPorts(n int) ([]int, error) {
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
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = b.Close()
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found %d free port pairs, want %d", len(ports), n)
	}
	return ports, nil
}
