package bus

import (
	"context"
	"fmt"
	"reflect"
	"sync"
)

// Sagas.
//
// A saga is a long-running process whose state outlives each message: an
// order waiting for its payment, with a deadline. Each instance is a row of
// the persistence (a SagaStore), keyed by the saga's name and a correlation
// value that every message of the saga carries. The messages a saga handles
// are registered with SagaStartedBy (they create the instance when there is
// none), SagaHandle (they need an existing instance) and SagaTimeout (the
// timeouts the saga requested for itself with RequestTimeout).
//
// State is saved with optimistic concurrency: an instance changed by
// another handler between load and save makes the handling run again at
// once on fresh state, without counting a retry, and whatever the losing
// run sent is discarded with it. With the outbox on, the state commits in
// the handling's transaction with the handler's writes and its messages.

// Saga registers the handlers of one saga, whose state is S (stored as
// JSON), on a bus. Create it with NewSaga before Start.
type Saga[S any] struct {
	info *sagaInfo
}

// sagaInfo is the part of a saga that does not depend on its state type.
type sagaInfo struct {
	bus   *Bus
	name  string
	store SagaStore
	err   error // a NewSaga error, returned by every registration

	mu       sync.Mutex
	handles  map[string]bool // message names registered on this saga
	timeouts map[string]bool // message names registered with SagaTimeout
}

// maxSagaName bounds a saga name, so every store can key on it.
const maxSagaName = 100

// maxCorrelation bounds a correlation value, for the same reason.
const maxCorrelation = 500

// NewSaga returns the saga name on b, with state type S. The name is the
// key space of its instances in the store, so keep it when the code
// changes: 1 to 100 letters, digits, '_', '-' or '.'. The persistence must
// be a SagaStore (the in-memory default, postgres, sqlite, mysql and
// mongodb are).
//
// An invalid name or persistence, or a state type that is not a struct or
// other JSON value type, makes every registration on the saga return the
// error (a *ConfigError or ErrInvalidRegistration).
func NewSaga[S any](b *Bus, name string) *Saga[S] {
	info := &sagaInfo{bus: b, name: name, handles: map[string]bool{}, timeouts: map[string]bool{}}
	switch st := reflect.TypeFor[S](); {
	case !validSagaName(name):
		info.err = fmt.Errorf("bus: NewSaga: %w", &ConfigError{Field: "saga name",
			Reason: fmt.Sprintf("%q must be 1 to %d letters, digits, '_', '-' or '.'", name, maxSagaName)})
	case st.Kind() == reflect.Pointer || st.Kind() == reflect.Interface || st.Kind() == reflect.Func || st.Kind() == reflect.Chan:
		info.err = fmt.Errorf("bus: NewSaga[%v] %q: %w: the state type must be a value type that encodes as JSON, such as a struct", st, name, ErrInvalidRegistration)
	default:
		store, ok := b.cfg.Persistence.(SagaStore)
		if !ok {
			info.err = fmt.Errorf("bus: NewSaga %q: %w", name, &ConfigError{Field: "Persistence",
				Reason: fmt.Sprintf("%T does not store sagas; use the in-memory default, postgres.New, mysql.New, sqlite.Open, mongodb.New or redis.NewPersistence", b.cfg.Persistence)})
		}
		info.store = store
	}
	return &Saga[S]{info: info}
}

func validSagaName(name string) bool {
	if name == "" || len(name) > maxSagaName {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Name returns the saga's name.
func (s *Saga[S]) Name() string { return s.info.name }

// SagaStartedBy registers fn for messages of type M on saga s: correlate
// returns the instance a message belongs to, and when there is none the
// message starts one, with the zero S. Of two start messages with one
// correlation value handled at the same time (in two processes, say), one
// creates the instance and the other runs on the state it saved.
func SagaStartedBy[S, M any](s *Saga[S], correlate func(M) string, fn func(ctx context.Context, state *S, msg M) error) error {
	return registerSaga(s, sagaStart, correlate, fn)
}

// SagaHandle registers fn for messages of type M on saga s, for an existing
// instance: correlate returns which one. A message whose instance does not
// exist (never started, or completed) is logged at debug level, counted
// (Metrics.SagaNotFound) and acknowledged without calling fn.
func SagaHandle[S, M any](s *Saga[S], correlate func(M) string, fn func(ctx context.Context, state *S, msg M) error) error {
	return registerSaga(s, sagaHandle, correlate, fn)
}

// SagaTimeout registers fn for the timeouts of type M that instances of s
// request with RequestTimeout. A timeout reaches the instance that
// requested it (it is not correlated again); a timeout whose instance
// completed meanwhile is dropped.
func SagaTimeout[S, M any](s *Saga[S], fn func(ctx context.Context, state *S, msg M) error) error {
	return registerSaga[S, M](s, sagaTimeout, nil, fn)
}

type sagaRole int

const (
	sagaStart sagaRole = iota
	sagaHandle
	sagaTimeout
)

func registerSaga[S, M any](s *Saga[S], role sagaRole, correlate func(M) string, fn func(context.Context, *S, M) error) error {
	info := s.info
	name := nameOfType[M]()
	switch {
	case info.err != nil:
		return info.err
	case fn == nil:
		return fmt.Errorf("bus: saga %s: %w: nil handler for %s", info.name, ErrInvalidRegistration, name)
	case role != sagaTimeout && correlate == nil:
		return fmt.Errorf("bus: saga %s: %w: %s has no correlation function; the saga could not tell which instance it belongs to", info.name, ErrInvalidRegistration, name)
	}
	info.mu.Lock()
	defer info.mu.Unlock()
	if info.handles[name] {
		return fmt.Errorf("bus: saga %s: %w: %s is already handled by this saga; register one handler per message type", info.name, ErrInvalidRegistration, name)
	}
	err := Handle(info.bus, func(ctx context.Context, msg M) error {
		var corr string
		if role != sagaTimeout {
			corr = correlate(msg)
		}
		return runSaga(ctx, info, role, corr, func(ctx context.Context, st *S) error { return fn(ctx, st, msg) })
	})
	if err != nil {
		return err
	}
	info.handles[name] = true
	if role == sagaTimeout {
		info.timeouts[name] = true
	}
	return nil
}

func (info *sagaInfo) isTimeout(msgName string) bool {
	info.mu.Lock()
	defer info.mu.Unlock()
	return info.timeouts[msgName]
}
