package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// call is one script run on one partition.
type call struct {
	part   int
	script *goredis.Script
	keys   []string
	args   []any
}

// run runs calls and returns the result of each, in order. Without
// WaitReplicas they go out in one pipeline (on a cluster, go-redis splits
// it by node and sends the parts in parallel). With it, the calls of each
// partition go out on one connection to its master, followed by WAIT, and a
// call whose write fewer replicas acknowledged fails with a
// *ReplicationError.
func (p *Persistence) run(ctx context.Context, calls []call) ([]*goredis.Cmd, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	if p.opts.WaitReplicas > 0 {
		return p.runWaiting(ctx, calls)
	}
	return p.runPipelined(ctx, calls)
}

// runPipelined runs calls in one pipeline, without WAIT: for the scripts
// that only read, for claims and settlements (a failover that undoes one
// makes a message claimable again, or leaves it leased until its lease
// ends: it is delivered at least once, never lost), and for every script
// when WaitReplicas is 0. It returns every command, each with its own
// result or error, and the first error. On a cluster, an error of a node
// that cannot be reached makes the client reload the cluster's slots, so a
// failover is followed within a round trip rather than at go-redis's
// periodic reload.
func (p *Persistence) runPipelined(ctx context.Context, calls []call) ([]*goredis.Cmd, error) {
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is checked below
	var first error
	for i, c := range calls {
		if isNoScript(cmds[i].Err()) {
			// The server lost its scripts (a restart, a failover, SCRIPT
			// FLUSH): the call did not run, so running it again is safe.
			cmds[i] = c.script.Run(ctx, p.client, c.keys, c.args...)
		}
		if err := cmds[i].Err(); err != nil && first == nil {
			first = err
		}
	}
	if cc, ok := p.client.(*goredis.ClusterClient); ok && isUnavailable(first) {
		cc.ReloadState(ctx)
	}
	return cmds, first
}

// someAnswered reports whether one of cmds succeeded.
func (p *Persistence) someAnswered(cmds []*goredis.Cmd) bool {
	for _, c := range cmds {
		if c != nil && c.Err() == nil {
			return true
		}
	}
	return false
}

// runWaiting runs the calls of each partition on its master, followed by
// WAIT, the partitions in parallel.
func (p *Persistence) runWaiting(ctx context.Context, calls []call) ([]*goredis.Cmd, error) {
	byPart := map[int][]int{}
	for i, c := range calls {
		byPart[c.part] = append(byPart[c.part], i)
	}
	cmds := make([]*goredis.Cmd, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for part, idx := range byPart {
		wg.Go(func() {
			err := p.runPartition(ctx, part, calls, idx, cmds)
			for _, i := range idx {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if cc, ok := p.client.(*goredis.ClusterClient); ok && isUnavailable(err) {
				cc.ReloadState(ctx)
			}
			return cmds, err
		}
	}
	return cmds, nil
}

// runPartition runs the calls idx of one partition and WAIT on one
// connection to the partition's master, and stores their commands in cmds.
func (p *Persistence) runPartition(ctx context.Context, part int, calls []call, idx []int, cmds []*goredis.Cmd) error {
	node, err := p.master(ctx, part)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		for _, i := range idx {
			c := calls[i]
			if attempt == 0 {
				cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			} else {
				cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
			}
		}
		wait := pipe.Do(ctx, "WAIT", p.opts.WaitReplicas, max(p.opts.WaitTimeout.Milliseconds(), 1))
		_, _ = pipe.Exec(ctx)
		retry := false
		for _, i := range idx {
			if err := cmds[i].Err(); err != nil {
				if isNoScript(err) && attempt == 0 {
					retry = true
					continue
				}
				return err
			}
		}
		if retry {
			continue
		}
		acked, err := wait.Int64()
		if err != nil {
			return fmt.Errorf("wait for replicas: %w", err)
		}
		if int(acked) < p.opts.WaitReplicas {
			return &ReplicationError{Partition: part, Acked: int(acked), Wanted: p.opts.WaitReplicas}
		}
		return nil
	}
}

// pipeliner is a client that pipelines: one server, or a cluster.
type pipeliner interface {
	Pipeline() goredis.Pipeliner
}

// master returns a client of the master of partition part.
func (p *Persistence) master(ctx context.Context, part int) (pipeliner, error) {
	if c, ok := p.client.(*goredis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, p.tags[part])
		if err != nil {
			return nil, fmt.Errorf("find the master of partition %d: %w", part, err)
		}
		return node, nil
	}
	return p.client, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// readDurability tells whether every master keeps an append-only file, or
// has at least WaitReplicas replicas when that is set. A server that
// refuses CONFIG (some managed services) counts as not durable.
func (p *Persistence) readDurability(ctx context.Context) (bool, error) {
	aof, replicated := true, p.opts.WaitReplicas > 0
	check := func(ctx context.Context, c *goredis.Client) error {
		cfg, err := c.ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			p.opts.Logger.WarnContext(ctx, "redis: CONFIG GET appendonly failed: counting the store as not durable", "addr", c.Options().Addr, "error", err)
			aof = false
		} else if cfg["appendonly"] != "yes" {
			aof = false
		}
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("info replication: %w", err)
		}
		if connectedReplicas(info) < p.opts.WaitReplicas {
			replicated = false
		}
		return nil
	}
	var mu sync.Mutex
	locked := func(ctx context.Context, c *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return check(ctx, c)
	}
	switch c := p.client.(type) {
	case *goredis.ClusterClient:
		if err := c.ForEachMaster(ctx, locked); err != nil {
			return false, err
		}
	case *goredis.Client:
		if err := check(ctx, c); err != nil {
			return false, err
		}
	default:
		return false, nil
	}
	return aof || replicated, nil
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(info string) int {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
