package bus

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

var _ SagaStore = (*MemoryPersistence)(nil)

// memorySagas holds the saga instances of a MemoryPersistence.
type memorySagas struct {
	mu        sync.Mutex
	instances map[sagaKey]SagaInstance
}

type sagaKey struct{ saga, correlation string }

func (m *memorySagas) init() {
	if m.instances == nil {
		m.instances = map[sagaKey]SagaInstance{}
	}
}

// clone copies the slices of inst, so the caller and the store never share
// memory.
func cloneInstance(inst SagaInstance) SagaInstance {
	inst.State = slices.Clone(inst.State)
	inst.Timeouts = slices.Clone(inst.Timeouts)
	return inst
}

// LoadSaga implements SagaStore.
func (p *MemoryPersistence) LoadSaga(ctx context.Context, saga, correlation string) (SagaInstance, bool, error) {
	if err := ctx.Err(); err != nil {
		return SagaInstance{}, false, err
	}
	m := &p.sagas
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, ok := m.instances[sagaKey{saga, correlation}]
	return cloneInstance(inst), ok, nil
}

// InsertSaga implements SagaStore.
func (p *MemoryPersistence) InsertSaga(ctx context.Context, inst SagaInstance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &p.sagas
	m.mu.Lock()
	defer m.mu.Unlock()
	m.init()
	k := sagaKey{inst.Saga, inst.Correlation}
	if _, ok := m.instances[k]; ok {
		return fmt.Errorf("%w: saga %s %q exists", ErrSagaConflict, inst.Saga, inst.Correlation)
	}
	inst = cloneInstance(inst)
	inst.Version = 1
	m.instances[k] = inst
	return nil
}

// UpdateSaga implements SagaStore.
func (p *MemoryPersistence) UpdateSaga(ctx context.Context, inst SagaInstance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &p.sagas
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sagaKey{inst.Saga, inst.Correlation}
	cur, ok := m.instances[k]
	if !ok || cur.Version != inst.Version {
		return fmt.Errorf("%w: saga %s %q is not at version %d", ErrSagaConflict, inst.Saga, inst.Correlation, inst.Version)
	}
	cur.State = slices.Clone(inst.State)
	cur.Timeouts = slices.Clone(inst.Timeouts)
	cur.Version++
	m.instances[k] = cur
	return nil
}

// DeleteSaga implements SagaStore.
func (p *MemoryPersistence) DeleteSaga(ctx context.Context, saga, correlation string, version int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m := &p.sagas
	m.mu.Lock()
	defer m.mu.Unlock()
	k := sagaKey{saga, correlation}
	if cur, ok := m.instances[k]; !ok || cur.Version != version {
		return fmt.Errorf("%w: saga %s %q is not at version %d", ErrSagaConflict, saga, correlation, version)
	}
	delete(m.instances, k)
	return nil
}
