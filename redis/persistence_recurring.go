package redis

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
)

var (
	_ bus.RecurringRuntimeStore = (*Persistence)(nil)
	_ bus.RecurringRunGuard     = (*Persistence)(nil)
)

// pendingGrace is how long the writer of an advance has to store and
// cancel its rows before another process does it for it: a writer that is
// alive does it within milliseconds; one past this is taken for stopped.
// pendingPoll is how often a process waiting on another's pending advance
// reads the record again.
const (
	pendingGrace = 5 * time.Second
	pendingPoll  = 50 * time.Millisecond
)

// pendingAdvance is what a committed advance still has to do: cancel the
// rows it names, unless leased, and store its rows.
type pendingAdvance struct {
	Cancel []string     `json:"c,omitempty"`
	Store  []pendingRow `json:"s,omitempty"`
}

// pendingRow is a row to store, as in bus.OutgoingMessage.
type pendingRow struct {
	ID        string `json:"i"`
	Kind      int    `json:"k"`
	Type      string `json:"t"`
	Envelope  []byte `json:"e"`
	DueAt     int64  `json:"d"`
	Transport string `json:"tr"`
}

// DeclareRecurring inserts the record, or gives it rec's definition when
// rec's Fingerprint differs (see bus.RecurringStore), in one script on the
// partition of the name.
func (p *Persistence) DeclareRecurring(ctx context.Context, rec bus.RecurringRecord) (bus.RecurringRecord, bool, error) {
	hs := "0"
	if rec.Spec != nil {
		hs = "1"
	}
	res, err := p.writeRecord(ctx, recDeclareScript, rec.Name, rec.Fingerprint, rec.Schedule, hs, rec.Spec, nsText(rec.Due))
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("redis: declare recurring %s: %w", rec.Name, err)
	}
	got, _ := recordOf(rec.Name, pairs(res[1:]))
	return got, res[0] == "changed", nil
}

// LoadRecurring returns the record name, after any advance pending on it
// is finished.
func (p *Persistence) LoadRecurring(ctx context.Context, name string) (bus.RecurringRecord, bool, error) {
	f, err := p.loadRecord(ctx, name)
	if err != nil {
		return bus.RecurringRecord{}, false, fmt.Errorf("redis: load recurring %s: %w", name, err)
	}
	rec, ok := recordOf(name, f)
	return rec, ok, nil
}

// ListRecurring returns every record, by name.
func (p *Persistence) ListRecurring(ctx context.Context) ([]bus.RecurringRecord, error) {
	return p.listRecurring(ctx, "-", "", 0)
}

// ListRecurringPage returns up to limit records whose names start with
// prefix and sort after after, by name: each partition's name index is
// read from there, and the first limit of all of them are loaded.
func (p *Persistence) ListRecurringPage(ctx context.Context, prefix, after string, limit int) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := "(" + after
	if prefix > after {
		start = "[" + prefix
	} else if after == "" {
		start = "-"
	}
	return p.listRecurring(ctx, start, prefix, limit)
}

// listRecurring loads the records named from start (a ZRANGE BYLEX
// bound) on, with prefix, up to limit (0: all).
func (p *Persistence) listRecurring(ctx context.Context, start, prefix string, limit int) ([]bus.RecurringRecord, error) {
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.StringSliceCmd, len(p.tags))
	for i, tag := range p.tags {
		cmds[i] = pipe.ZRangeArgs(ctx, goredis.ZRangeArgs{Key: tag + ":rn", Start: start, Stop: "+", ByLex: true, Count: int64(limit)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redis: list recurring: %w", err)
	}
	var names []string
	for _, c := range cmds {
		for _, n := range c.Val() {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	if limit > 0 {
		names = names[:min(len(names), limit)]
	}
	out := make([]bus.RecurringRecord, 0, len(names))
	for _, n := range names {
		rec, ok, err := p.LoadRecurring(ctx, n)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// AdvanceRecurring applies adv if the record still has adv.Generation,
// adv.Fingerprint, adv.Paused and adv.From as Last. The record and the
// rows are in different partitions (the rows by the hash of their IDs), so
// on Redis Cluster in different slots, which no script spans: the advance
// goes in two steps. The commit point is the record's script, which
// checks and moves the record and keeps the advance's rows in it as
// pending; then the rows named are cancelled unless leased, the rows
// stored (an ID already stored keeps its row), and the pending rows
// dropped. A process that stops in between leaves the advance pending:
// every change of the record waits for it, and the first process to read
// the record once it is 5 s old finishes it, so the advance is all or
// nothing for every reader. Finishing twice stores a row twice only if
// its first copy was sent and deleted in between: that takes a writer
// that stopped within milliseconds of storing a row due at once.
func (p *Persistence) AdvanceRecurring(ctx context.Context, adv bus.RecurringAdvance) (bool, error) {
	var pend string
	if len(adv.Store) > 0 || len(adv.Cancel) > 0 {
		pa := pendingAdvance{Cancel: adv.Cancel}
		for i, m := range adv.Store {
			if m.ID == "" || m.Envelope == nil {
				return false, fmt.Errorf("redis: advance recurring %s: row %d (%q): %w: empty ID or no envelope", adv.Name, i, m.ID, ErrInvalidRow)
			}
			pa.Store = append(pa.Store, pendingRow{ID: m.ID, Kind: int(m.Kind), Type: m.Type, Envelope: m.Envelope,
				DueAt: m.DueAt.UnixNano(), Transport: m.Transport})
		}
		b, err := json.Marshal(pa)
		if err != nil {
			return false, fmt.Errorf("redis: advance recurring %s: %w", adv.Name, err)
		}
		pend = string(b)
	}
	ticks := make([]string, len(adv.Ticks))
	for i, t := range adv.Ticks {
		ticks[i] = nsText(t)
	}
	paused := "0"
	if adv.Paused {
		paused = "1"
	}
	res, err := p.writeRecord(ctx, recAdvanceScript, adv.Name, strconv.FormatInt(adv.Generation, 10), adv.Fingerprint, paused,
		nsText(adv.From), nsText(adv.Last), strings.Join(ticks, ","), nsText(adv.Alive), nsText(adv.Due),
		strconv.FormatInt(adv.Runs, 10), strconv.FormatInt(adv.Skipped, 10), pend)
	if err != nil {
		return false, fmt.Errorf("redis: advance recurring %s: %w", adv.Name, err)
	}
	if res[0] != "ok" {
		return false, nil
	}
	if pend != "" && p.afterCommit != nil {
		if err := p.afterCommit(); err != nil {
			return false, fmt.Errorf("redis: advance recurring %s: committed, to be finished by the next reader: %w", adv.Name, err)
		}
	}
	if pend != "" {
		if err := p.finishPending(ctx, adv.Name, pend, res[1]); err != nil {
			return false, fmt.Errorf("redis: advance recurring %s: committed, to be finished by the next reader: %w", adv.Name, err)
		}
	}
	return true, nil
}

// SetRecurringPaused pauses or resumes the record name.
func (p *Persistence) SetRecurringPaused(ctx context.Context, name string, paused bool, at time.Time) (bool, error) {
	flag := "0"
	if paused {
		flag = "1"
	}
	res, err := p.writeRecord(ctx, recPauseScript, name, flag, nsText(at))
	if err != nil {
		return false, fmt.Errorf("redis: pause recurring %s: %w", name, err)
	}
	return res[0] == "ok", nil
}

// DeleteRecurring replaces the record name by its tombstone, which keeps
// its generation, then cancels the rows named that no claim holds.
func (p *Persistence) DeleteRecurring(ctx context.Context, name string, cancel []string) (bool, error) {
	res, err := p.writeRecord(ctx, recDeleteScript, name)
	if err != nil {
		return false, fmt.Errorf("redis: delete recurring %s: %w", name, err)
	}
	if res[0] != "ok" {
		return false, nil
	}
	for _, id := range cancel {
		if _, err := p.CancelOutgoing(ctx, id); err != nil {
			return true, fmt.Errorf("redis: delete recurring %s: %w", name, err)
		}
	}
	return true, nil
}

// ClaimDueRecurring returns up to limit runtime records due at now,
// earliest Due first, and moves their Due to now + lease. Like a message
// claim it reads every partition's index of runtime records first (one
// pipeline), keeps the earliest limit, then moves them with one script per
// partition; a record another dispatcher moved meanwhile is not returned.
func (p *Persistence) ClaimDueRecurring(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]bus.RecurringRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	nowUs := now.UnixMicro()
	pipe := p.client.Pipeline()
	cmds := make([]*goredis.ZSliceCmd, len(p.tags))
	for i, tag := range p.tags {
		cmds[i] = pipe.ZRangeArgsWithScores(ctx, goredis.ZRangeArgs{Key: tag + ":rd", Start: "-inf",
			Stop: strconv.FormatInt(nowUs, 10), ByScore: true, Count: int64(limit)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redis: claim recurring: %w", err)
	}
	type due struct {
		part  int
		name  string
		score float64
	}
	var all []due
	for i, c := range cmds {
		for _, z := range c.Val() {
			all = append(all, due{part: i, name: fmt.Sprint(z.Member), score: z.Score})
		}
	}
	slices.SortFunc(all, func(a, b due) int { return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(a.name, b.name)) })
	all = all[:min(len(all), limit)]
	newDue := now.Add(lease)
	byPart := map[int][]any{}
	for _, d := range all {
		if byPart[d.part] == nil {
			byPart[d.part] = []any{strconv.FormatInt(nowUs, 10), nsText(newDue), strconv.FormatInt(newDue.UnixMicro(), 10)}
		}
		byPart[d.part] = append(byPart[d.part], d.name)
	}
	var calls []call
	for part, args := range byPart {
		calls = append(calls, call{part: part, script: recClaimScript, keys: []string{p.tags[part]}, args: args})
	}
	res, err := p.runPipelined(ctx, calls) // a claim: no WAIT (see runPipelined)
	if err != nil {
		return nil, fmt.Errorf("redis: claim recurring: %w", err)
	}
	var out []bus.RecurringRecord
	for _, c := range res {
		vals, err := c.Slice()
		if err != nil {
			return nil, fmt.Errorf("redis: claim recurring: %w", err)
		}
		for i := 0; i+1 < len(vals); {
			name := fmt.Sprint(vals[i])
			n, _ := vals[i+1].(int64)
			end := min(i+2+int(n), len(vals))
			fields := make([]string, 0, n)
			for _, v := range vals[i+2 : end] {
				fields = append(fields, fmt.Sprint(v))
			}
			i = end
			if rec, ok := recordOf(name, pairs(fields)); ok {
				out = append(out, rec)
			}
		}
	}
	slices.SortFunc(out, func(a, b bus.RecurringRecord) int { return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}

// writeRecord runs a record script on the partition of name, after the
// advance pending on the record, if any, is finished (waiting for its
// writer while it is young). It returns the script's result as text.
func (p *Persistence) writeRecord(ctx context.Context, script *goredis.Script, name string, args ...any) ([]string, error) {
	part := p.partitionOf(name)
	for {
		cmds, err := p.run(ctx, []call{{part: part, script: script, keys: []string{p.tags[part]}, args: append([]any{name}, args...)}})
		if err != nil {
			return nil, err
		}
		res, err := texts(cmds[0])
		if err != nil {
			return nil, err
		}
		if len(res) == 0 {
			return nil, fmt.Errorf("empty reply from the record script")
		}
		if res[0] != "pending" {
			return res, nil
		}
		if err := p.awaitPending(ctx, name, res); err != nil {
			return nil, err
		}
	}
}

// loadRecord returns the fields of the record name once no advance is
// pending on it.
func (p *Persistence) loadRecord(ctx context.Context, name string) (map[string]string, error) {
	part := p.partitionOf(name)
	for {
		cmds, err := p.runPipelined(ctx, []call{{part: part, script: recGetScript, keys: []string{p.tags[part]}, args: []any{name}}})
		if err != nil {
			return nil, err
		}
		res, err := texts(cmds[0])
		if err != nil || len(res) == 0 {
			return nil, fmt.Errorf("read the record: %w", err)
		}
		f := pairs(res[1:])
		if f["pd"] == "" {
			return f, nil
		}
		if err := p.awaitPending(ctx, name, []string{"pending", f["pw"], res[0]}); err != nil {
			return nil, err
		}
	}
}

// awaitPending waits a little for the writer of a young pending advance
// ({"pending", written µs, now µs}), or finishes an old one.
func (p *Persistence) awaitPending(ctx context.Context, name string, res []string) error {
	written, _ := strconv.ParseInt(res[1], 10, 64)
	now, _ := strconv.ParseInt(res[2], 10, 64)
	if time.Duration(now-written)*time.Microsecond < pendingGrace {
		t := time.NewTimer(pendingPoll)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	part := p.partitionOf(name)
	cmds, err := p.runPipelined(ctx, []call{{part: part, script: recGetScript, keys: []string{p.tags[part]}, args: []any{name}}})
	if err != nil {
		return err
	}
	all, err := texts(cmds[0])
	if err != nil || len(all) == 0 {
		return fmt.Errorf("read the record: %w", err)
	}
	f := pairs(all[1:])
	if f["pd"] == "" {
		return nil
	}
	return p.finishPending(ctx, name, f["pd"], f["q"])
}

// finishPending cancels and stores the rows of the pending advance of
// write seq, then drops them from the record.
func (p *Persistence) finishPending(ctx context.Context, name, pend, seq string) error {
	var pa pendingAdvance
	if err := json.Unmarshal([]byte(pend), &pa); err != nil {
		return fmt.Errorf("read the pending advance: %w", err)
	}
	for _, id := range pa.Cancel {
		if _, err := p.CancelOutgoing(ctx, id); err != nil {
			return err
		}
	}
	if len(pa.Store) > 0 {
		msgs := make([]bus.OutgoingMessage, len(pa.Store))
		for i, r := range pa.Store {
			msgs[i] = bus.OutgoingMessage{ID: r.ID, Kind: bus.Kind(r.Kind), Type: r.Type, Envelope: r.Envelope,
				DueAt: time.Unix(0, r.DueAt), Transport: r.Transport}
		}
		if err := p.StoreOutgoing(ctx, msgs); err != nil {
			return err
		}
	}
	part := p.partitionOf(name)
	_, err := p.run(ctx, []call{{part: part, script: recDoneScript, keys: []string{p.tags[part]}, args: []any{name, seq}}})
	return err
}

// BeginRecurringRun begins the run id of the schedule name unless another
// occurrence's run is under way at now (bus.RecurringRunGuard). The run
// is a hash in the partition of the name, which expires an hour after
// until.
func (p *Persistence) BeginRecurringRun(ctx context.Context, name, id string, now, until time.Time) (bool, error) {
	part := p.partitionOf(name)
	cmds, err := p.runPipelined(ctx, []call{{part: part, script: runBeginScript, keys: []string{p.tags[part]},
		args: []any{name, id, strconv.FormatInt(now.UnixMicro(), 10), strconv.FormatInt(until.UnixMicro(), 10)}}})
	if err != nil {
		return false, fmt.Errorf("redis: begin the run of %s: %w", name, err)
	}
	n, err := cmds[0].Int()
	if err != nil {
		return false, fmt.Errorf("redis: begin the run of %s: %w", name, err)
	}
	return n == 1, nil
}

// EndRecurringRun ends the run id of the schedule name, if it is the one
// under way.
func (p *Persistence) EndRecurringRun(ctx context.Context, name, id string) error {
	part := p.partitionOf(name)
	if _, err := p.runPipelined(ctx, []call{{part: part, script: runEndScript, keys: []string{p.tags[part]}, args: []any{name, id}}}); err != nil {
		return fmt.Errorf("redis: end the run of %s: %w", name, err)
	}
	return nil
}

// recordOf reads a record's fields; false for none or a tombstone.
func recordOf(name string, f map[string]string) (bus.RecurringRecord, bool) {
	if f["f"] == "" {
		return bus.RecurringRecord{}, false
	}
	g, _ := strconv.ParseInt(f["g"], 10, 64)
	runs, _ := strconv.ParseInt(f["r"], 10, 64)
	skipped, _ := strconv.ParseInt(f["sk"], 10, 64)
	r := bus.RecurringRecord{Name: name, Fingerprint: f["f"], Schedule: f["s"], Generation: g, Paused: f["p"] == "1",
		Last: fromNsText(f["l"]), Alive: fromNsText(f["al"]), Due: fromNsText(f["d"]), Runs: runs, Skipped: skipped}
	if f["tk"] != "" {
		for t := range strings.SplitSeq(f["tk"], ",") {
			r.Ticks = append(r.Ticks, fromNsText(t))
		}
	}
	if f["hs"] == "1" {
		r.Spec = append([]byte{}, f["sp"]...)
	}
	return r, true
}

// pairs makes a map of HGETALL's field, value list.
func pairs(kv []string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// records decodes the records of width fields that each partition's
// reply in cmds holds, one after the other.
func records[T any](cmds []*goredis.Cmd, width int, decode func([]string) T) ([]T, error) {
	var out []T
	for _, c := range cmds {
		vals, err := texts(c)
		if err != nil {
			return nil, err
		}
		for i := 0; i+width <= len(vals); i += width {
			out = append(out, decode(vals[i:i+width]))
		}
	}
	return out, nil
}

// texts returns a script's array reply as strings.
func texts(c *goredis.Cmd) ([]string, error) {
	vals, err := c.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = fmt.Sprint(v)
	}
	return out, nil
}

// nsText is a record's time as text: Unix nanoseconds, "" for zero.
func nsText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(max(t.UnixNano(), 0), 10)
}

func fromNsText(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if s == "" || err != nil {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
