package sqlstore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

// scriptTxKey carries a scripted caller's transaction in a context.
type scriptTxKey struct{}

// scriptOutbox returns an outbox on db whose hooks record what they saw.
func scriptOutbox(db *scriptDB, check error) (*Outbox, *[]string) {
	var seen []string
	d := scriptDialect()
	d.TxFrom = func(ctx context.Context) (Tx, bool) {
		tx, ok := ctx.Value(scriptTxKey{}).(Tx)
		return tx, ok
	}
	return NewOutbox(d, db, OutboxSQL{Inbox: "inbox", Purge: "purge"}, OutboxHooks{
		Insert: func(_ context.Context, _ Tx, msgs []backend.OutgoingMessage, caller bool) error {
			seen = append(seen, "insert")
			if caller {
				seen = append(seen, "caller")
			}
			return nil
		},
		Validate: func(msgs []backend.OutgoingMessage) error {
			seen = append(seen, "validate")
			return nil
		},
		Cancel: func(context.Context, Tx, string) (int64, error) {
			seen = append(seen, "cancel")
			return 1, nil
		},
		Context: func(ctx context.Context, tx Tx) context.Context { return context.WithValue(ctx, scriptTxKey{}, tx) },
		Check: func(context.Context, Tx) error {
			seen = append(seen, "check")
			return check
		},
		Foreign:  func(_ context.Context, err error) bool { return errors.Is(err, errForeign) },
		PurgeArg: func(d time.Duration) any { return d },
	}), &seen
}

var errForeign = errors.New("script: another database")

func TestBeginHandlingDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, res := range []scriptResult{{n: 0}, {err: errScriptUnique}} {
		db := &scriptDB{results: []scriptResult{res}}
		o, _ := scriptOutbox(db, nil)
		h, handled, err := o.BeginHandling(ctx, "e", "m")
		if h != nil || !handled || err != nil {
			t.Errorf("%+v: %v, %v, %v; want handled", res, h, handled, err)
		}
		if !reflect.DeepEqual(db.ended, []string{"rollback"}) {
			t.Errorf("%+v: ended %v, want a rollback", res, db.ended)
		}
	}
	db := &scriptDB{results: []scriptResult{{err: errors.New("boom")}}}
	o, _ := scriptOutbox(db, nil)
	if _, handled, err := o.BeginHandling(ctx, "e", "m"); handled || err == nil {
		t.Errorf("a failed inbox insert: handled %v, err %v", handled, err)
	}
}

func TestHandlingJoinEndsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, commit := range []bool{true, false} {
		db := &scriptDB{}
		o, seen := scriptOutbox(db, nil)
		var ends []bool
		o.h.Join = func(context.Context, Tx, string) (func(bool), error) {
			return func(c bool) { ends = append(ends, c) }, nil
		}
		h, handled, err := o.BeginHandling(ctx, "e", "m")
		if err != nil || handled {
			t.Fatalf("begin: %v, %v", handled, err)
		}
		if _, ok := o.d.TxFrom(h.Context(ctx)); !ok {
			t.Error("the handling's context carries no transaction")
		}
		if err := h.StoreOutgoing(ctx, []backend.OutgoingMessage{{ID: "a"}}); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := h.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ends, []bool{commit}) {
			t.Errorf("commit %v: ends %v", commit, ends)
		}
		if !reflect.DeepEqual(*seen, []string{"validate", "insert"}) {
			t.Errorf("commit %v: hooks %v", commit, *seen)
		}
	}
}

func TestCallerTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := &scriptDB{}
	o, seen := scriptOutbox(db, nil)
	if o.CarriesTx(ctx) {
		t.Error("a bare ctx carries a transaction")
	}
	if ok, err := o.StoreOutgoingInCallerTx(ctx, []backend.OutgoingMessage{{ID: "a"}}); ok || err != nil {
		t.Errorf("without a transaction: %v, %v", ok, err)
	}
	tctx := context.WithValue(ctx, scriptTxKey{}, Tx(scriptTx{db}))
	if !o.CarriesTx(tctx) {
		t.Error("a caller's transaction is not seen")
	}
	if ok, err := o.StoreOutgoingInCallerTx(tctx, []backend.OutgoingMessage{{ID: "a"}}); !ok || err != nil {
		t.Errorf("in a transaction: %v, %v", ok, err)
	}
	if want := []string{"validate", "check", "insert", "caller"}; !reflect.DeepEqual(*seen, want) {
		t.Errorf("hooks %v, want %v", *seen, want)
	}

	o, seen = scriptOutbox(db, errForeign)
	if ok, err := o.StoreOutgoingInCallerTx(tctx, []backend.OutgoingMessage{{ID: "a"}}); ok || !errors.Is(err, errForeign) {
		t.Errorf("a refused transaction: %v, %v", ok, err)
	}
	if cancelled, joined, err := o.CancelOutgoingInTx(tctx, "a"); cancelled || joined || err != nil {
		t.Errorf("cancel in a foreign transaction: %v, %v, %v; want left alone", cancelled, joined, err)
	}
	if want := []string{"validate", "check", "check"}; !reflect.DeepEqual(*seen, want) {
		t.Errorf("refused: hooks %v, want %v", *seen, want)
	}

	o, _ = scriptOutbox(db, nil)
	if cancelled, joined, err := o.CancelOutgoingInTx(tctx, "a"); !cancelled || !joined || err != nil {
		t.Errorf("cancel: %v, %v, %v", cancelled, joined, err)
	}
}

func TestPurgeInbox(t *testing.T) {
	t.Parallel()
	db := &scriptDB{results: []scriptResult{{n: 7}}}
	o, _ := scriptOutbox(db, nil)
	if n, err := o.PurgeInbox(context.Background(), 0, 0); n != 0 || err != nil || len(db.calls) != 0 {
		t.Errorf("limit 0: %d, %v, %d statements", n, err, len(db.calls))
	}
	n, err := o.PurgeInbox(context.Background(), time.Minute, 10)
	if n != 7 || err != nil || !reflect.DeepEqual(db.calls, []scriptCall{{"purge", []any{time.Minute, 10}}}) {
		t.Errorf("purge: %d, %v, %v", n, err, db.calls)
	}
}
