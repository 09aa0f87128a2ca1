package postgres

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/postbus/bus/backend/sqlstore"
)

// Defaults for the zero values of Options.
const (
	DefaultSchema               = "public"
	DefaultTable                = "outgoing_messages"
	DefaultMaxBatchRows         = 2000
	DefaultMaxConcurrentInserts = 2
	DefaultNotifyWithin         = time.Minute
)

// maxIdentifierLen is PostgreSQL's NAMEDATALEN-1: longer names are silently
// truncated by the server, so they are rejected here instead.
const maxIdentifierLen = 63

// indexSuffix names the claim index: <table><indexSuffix>. oldIndexSuffix
// names the (available_at, id) index of earlier versions, which Setup drops.
// Table names are limited so that both index names fit in maxIdentifierLen.
const (
	indexSuffix    = "_claim_idx"
	oldIndexSuffix = "_available_at_idx"
)

// Inbox table names: the default is <Table><inboxSuffix>; its purge index is
// <InboxTable><inboxIndexSuffix>, which must fit in maxIdentifierLen.
const (
	inboxSuffix      = "_inbox"
	inboxIndexSuffix = "_purge_idx"
)

// Operations names (bus.ScheduledBrowser, bus.FailedStore): the due-time
// and type indexes of the table, <Table><dueIndexSuffix> and
// <Table><typeIndexSuffix>; the failed-message table <Table><failedSuffix>
// and its indexes. All are shorter than oldIndexSuffix, so every name fits.
const (
	dueIndexSuffix    = "_due_idx"
	typeIndexSuffix   = "_type_due_idx"
	failedSuffix      = "_failed"
	failedLastSuffix  = "_last_idx"
	failedGroupSuffix = "_grp_idx"
)

// sagaSuffix names the default saga table: <Table><sagaSuffix>.
const sagaSuffix = "_sagas"

// Options configures a Persistence. Every zero value means the documented
// default.
type Options struct {
	// Schema holds the table. Default "public". Setup creates it if missing.
	Schema string
	// Table is the scheduled-message table. Default "outgoing_messages".
	// Schema and Table must be plain identifiers (letters, digits and
	// underscores, not starting with a digit); they are always quoted, so
	// their case is kept. Failed messages (bus.FailedStore) are kept in
	// the table Table + "_failed" ("outgoing_messages_failed"), and
	// recurring schedules (bus.RecurringStore) in Table + "_recurring".
	Table string
	// InboxTable is the inbox of the transactional outbox: one row per
	// message an endpoint handled, (endpoint, message_id, handled_at), in
	// Schema. Default Table + "_inbox" ("outgoing_messages_inbox"). A plain
	// identifier of at most 53 bytes.
	InboxTable string
	// SagaTable holds the saga instances (bus.SagaStore): one row per
	// (saga, correlation), in Schema. Default Table + "_sagas"
	// ("outgoing_messages_sagas"). A plain identifier of at most 63 bytes.
	SagaTable string
	// DisableNotify turns LISTEN/NOTIFY off: StoreOutgoing issues no
	// pg_notify and WatchDue only waits for its context to end, so
	// dispatchers rely on polling. Set it behind PgBouncer in transaction
	// pooling mode, where LISTEN does not work. Default false.
	DisableNotify bool
	// NotifyWithin limits notifications to batches whose earliest row is
	// due within this long of the insert. A row due later needs none: every
	// dispatcher looks at the next due time at least once per PollInterval,
	// so a poll finds it in time. Skipping the notification keeps bulk
	// scheduling of far-off messages off PostgreSQL's notification queue,
	// whose lock serializes notifying commits. Keep it at least as long as
	// the dispatchers' PollInterval. Default 1 minute.
	NotifyWithin time.Duration
	// MaxBatchRows caps how many rows of concurrent StoreOutgoing calls are
	// grouped into one INSERT. A single call larger than this is still one
	// statement. Default 2000.
	MaxBatchRows int
	// MaxConcurrentInserts caps how many grouped INSERTs run at once, each
	// on its own pooled connection; further calls queue and are grouped
	// into the next one. Default 2.
	MaxConcurrentInserts int
	// Logger receives warnings from WatchDue reconnections and from
	// stores whose commit was in doubt (see StoreOutgoing). Default
	// slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Schema = cmp.Or(o.Schema, DefaultSchema)
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.InboxTable = cmp.Or(o.InboxTable, o.Table+inboxSuffix)
	o.SagaTable = cmp.Or(o.SagaTable, o.Table+sagaSuffix)
	o.MaxBatchRows = cmp.Or(o.MaxBatchRows, DefaultMaxBatchRows)
	o.MaxConcurrentInserts = cmp.Or(o.MaxConcurrentInserts, DefaultMaxConcurrentInserts)
	o.NotifyWithin = cmp.Or(o.NotifyWithin, DefaultNotifyWithin)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o Options) validate() error {
	if err := checkName("Schema", o.Schema, maxIdentifierLen); err != nil {
		return err
	}
	if err := checkName("Table", o.Table, maxIdentifierLen-max(len(indexSuffix), len(oldIndexSuffix))); err != nil {
		return err
	}
	if err := checkName("InboxTable", o.InboxTable, maxIdentifierLen-len(inboxIndexSuffix)); err != nil {
		return err
	}
	if err := checkName("SagaTable", o.SagaTable, maxIdentifierLen); err != nil {
		return err
	}
	if o.MaxBatchRows < 0 {
		return &OptionsError{Field: "MaxBatchRows", Reason: "must not be negative"}
	}
	if o.MaxConcurrentInserts < 0 {
		return &OptionsError{Field: "MaxConcurrentInserts", Reason: "must not be negative"}
	}
	if o.NotifyWithin < 0 {
		return &OptionsError{Field: "NotifyWithin", Reason: "must not be negative"}
	}
	return nil
}

func checkName(field, name string, maxLen int) error {
	if r := sqlstore.CheckName(name, maxLen); r != "" {
		return &NameError{Field: field, Name: name, Reason: r}
	}
	return nil
}
