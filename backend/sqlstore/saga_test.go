package sqlstore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

func TestSagasConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inst := backend.SagaInstance{Saga: "s", Correlation: "c", ID: "i", State: []byte(`{}`), Version: 3}
	for _, tc := range []struct {
		name  string
		res   scriptResult
		write func(s *Sagas) error
	}{
		{"insert changed no row", scriptResult{}, func(s *Sagas) error { return s.InsertSaga(ctx, inst) }},
		{"insert met a duplicate key", scriptResult{err: errScriptUnique}, func(s *Sagas) error { return s.InsertSaga(ctx, inst) }},
		{"update changed no row", scriptResult{}, func(s *Sagas) error { return s.UpdateSaga(ctx, inst) }},
		{"delete changed no row", scriptResult{}, func(s *Sagas) error { return s.DeleteSaga(ctx, "s", "c", 3) }},
	} {
		db := &scriptDB{results: []scriptResult{tc.res}}
		err := tc.write(NewSagas(scriptDialect(), db, SagaSQL{}))
		if !errors.Is(err, backend.ErrSagaConflict) {
			t.Errorf("%s: %v, want ErrSagaConflict", tc.name, err)
		}
	}
	// A duplicate key on an update is an error, not a conflict.
	db := &scriptDB{results: []scriptResult{{err: errScriptUnique}}}
	if err := NewSagas(scriptDialect(), db, SagaSQL{}).UpdateSaga(ctx, inst); errors.Is(err, backend.ErrSagaConflict) || !errors.Is(err, errScriptUnique) {
		t.Errorf("update with a duplicate key: %v", err)
	}
}

func TestSagasTimeoutsAndClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	db := &scriptDB{}
	s := NewSagas(scriptDialect(), db, SagaSQL{Insert: "insert", Update: "update", Now: func() time.Time { return now }})
	if err := s.InsertSaga(ctx, backend.SagaInstance{Saga: "s", Correlation: "c", ID: "i"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSaga(ctx, backend.SagaInstance{Saga: "s", Correlation: "c", State: []byte(`1`), Timeouts: []string{"a"}, Version: 2}); err != nil {
		t.Fatal(err)
	}
	want := []scriptCall{
		{"insert", []any{"s", "c", "i", "", "[]", now}},
		{"update", []any{"1", `["a"]`, "s", "c", int64(2), now}},
	}
	if !reflect.DeepEqual(db.calls, want) {
		t.Errorf("calls %v, want %v", db.calls, want)
	}

	db = &scriptDB{}
	s = NewSagas(scriptDialect(), db, SagaSQL{ArrayTimeouts: true})
	if err := s.InsertSaga(ctx, backend.SagaInstance{}); err != nil {
		t.Fatal(err)
	}
	if ts := db.calls[0].args[4]; !reflect.DeepEqual(ts, []string{}) {
		t.Errorf("array timeouts of none: %#v, want an empty slice", ts)
	}
}

func TestSagasLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := &scriptDB{results: []scriptResult{
		{row: []any{"i", []byte(nil), []byte(`["a","b"]`), int64(4)}},
		{row: []any{"i", []byte(`{}`), []byte(`[]`), int64(1)}},
		{},
	}}
	s := NewSagas(scriptDialect(), db, SagaSQL{})
	inst, ok, err := s.LoadSaga(ctx, "s", "c")
	want := backend.SagaInstance{Saga: "s", Correlation: "c", ID: "i", State: []byte{}, Timeouts: []string{"a", "b"}, Version: 4}
	if err != nil || !ok || !reflect.DeepEqual(inst, want) {
		t.Errorf("load: %+v, %v, %v; want %+v", inst, ok, err, want)
	}
	if inst, _, _ := s.LoadSaga(ctx, "s", "c"); inst.Timeouts != nil {
		t.Errorf("no timeouts read as %#v, want nil", inst.Timeouts)
	}
	if _, ok, err := s.LoadSaga(ctx, "s", "c"); ok || err != nil {
		t.Errorf("no row: %v, %v", ok, err)
	}
}
