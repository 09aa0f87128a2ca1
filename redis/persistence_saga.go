package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
)

var _ bus.SagaStore = (*Persistence)(nil)

// A saga instance is a hash at <tag>:s:<len(saga)>:<saga>:<correlation> in
// the partition of its saga and correlation: i its ID, st its state, to
// its timeouts (a JSON array) and v its version. Each write is one script
// that compares the version and writes, atomically on the partition's
// master: the optimistic concurrency of bus.SagaStore holds as long as
// that master does. A failover to a replica that had not received the
// last writes loses them (the instance goes back to an older version);
// PersistenceOptions.WaitReplicas narrows that window to writes that no
// replica acknowledged.

// sagaInsertScript stores a new instance unless one exists.
//
//	ARGV[1] ID, ARGV[2] state, ARGV[3] timeouts
var sagaInsertScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'i', ARGV[1], 'st', ARGV[2], 'to', ARGV[3], 'v', 1)
return 1
`)

// sagaUpdateScript replaces the state and timeouts of version ARGV[1].
var sagaUpdateScript = goredis.NewScript(`
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'to', ARGV[3], 'v', tonumber(ARGV[1]) + 1)
return 1
`)

// sagaDeleteScript deletes the instance if its version is ARGV[1].
var sagaDeleteScript = goredis.NewScript(`
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

func init() {
	storeScripts = append(storeScripts, sagaInsertScript, sagaUpdateScript, sagaDeleteScript)
}

// sagaKey returns the partition and key of an instance.
func (p *Persistence) sagaKey(saga, correlation string) (int, string) {
	name := strconv.Itoa(len(saga)) + ":" + saga + ":" + correlation
	part := p.partitionOf(name)
	return part, p.tags[part] + ":s:" + name
}

// LoadSaga returns the instance of saga with the correlation value.
func (p *Persistence) LoadSaga(ctx context.Context, saga, correlation string) (bus.SagaInstance, bool, error) {
	_, key := p.sagaKey(saga, correlation)
	f, err := p.client.HGetAll(ctx, key).Result()
	if err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("redis: load saga %s: %w", saga, err)
	}
	if f["v"] == "" {
		return bus.SagaInstance{}, false, nil
	}
	v, _ := strconv.ParseInt(f["v"], 10, 64)
	inst := bus.SagaInstance{Saga: saga, Correlation: correlation, ID: f["i"], State: []byte(f["st"]), Version: v}
	if err := json.Unmarshal([]byte(f["to"]), &inst.Timeouts); err != nil {
		return bus.SagaInstance{}, false, fmt.Errorf("redis: load saga %s: timeouts: %w", saga, err)
	}
	return inst, true, nil
}

// InsertSaga stores a new instance at version 1, or returns an error
// wrapping bus.ErrSagaConflict when one exists.
func (p *Persistence) InsertSaga(ctx context.Context, inst bus.SagaInstance) error {
	to, err := json.Marshal(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("redis: insert saga %s: %w", inst.Saga, err)
	}
	return p.sagaWrite(ctx, "insert", sagaInsertScript, inst.Saga, inst.Correlation, inst.ID, inst.State, to)
}

// UpdateSaga replaces the state and timeouts of the instance at
// inst.Version, or returns an error wrapping bus.ErrSagaConflict.
func (p *Persistence) UpdateSaga(ctx context.Context, inst bus.SagaInstance) error {
	to, err := json.Marshal(inst.Timeouts)
	if err != nil {
		return fmt.Errorf("redis: update saga %s: %w", inst.Saga, err)
	}
	return p.sagaWrite(ctx, "update", sagaUpdateScript, inst.Saga, inst.Correlation, strconv.FormatInt(inst.Version, 10), inst.State, to)
}

// DeleteSaga removes the instance at version, or returns an error wrapping
// bus.ErrSagaConflict.
func (p *Persistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	return p.sagaWrite(ctx, "delete", sagaDeleteScript, saga, correlation, strconv.FormatInt(version, 10))
}

func (p *Persistence) sagaWrite(ctx context.Context, op string, script *goredis.Script, saga, correlation string, args ...any) error {
	part, key := p.sagaKey(saga, correlation)
	cmds, err := p.run(ctx, []call{{part: part, script: script, keys: []string{key}, args: args}})
	if err != nil {
		return fmt.Errorf("redis: %s saga %s: %w", op, saga, err)
	}
	if n, err := cmds[0].Int(); err != nil {
		return fmt.Errorf("redis: %s saga %s: %w", op, saga, err)
	} else if n == 0 {
		return fmt.Errorf("redis: %s saga %s (%s): %w", op, saga, correlation, bus.ErrSagaConflict)
	}
	return nil
}
