package storetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// The names the envelopes and rows of the worker tests carry.
const (
	TickType          = "storetest.Tick" // the wire name of Tick
	Endpoint          = "multiproc"      // the workers' endpoint, the ticks' destination
	TransportIdentity = "multiproc-sync" // the workers' transport identity, on every row
)

// WorkerEnv carries a worker's arguments (WorkerSpec.Args, space-separated)
// to a re-executed test binary: see WorkerIfAsked and Reexec.
const WorkerEnv = "POSTBUS_STORETEST_WORKER"

// Tick is the scheduled message of the worker tests.
type Tick struct{ N int }

// MessageName keeps the wire name independent of the package path.
func (Tick) MessageName() string { return TickType }

// WorkerSpec is what one worker process runs.
type WorkerSpec struct {
	Space     string        // the store's namespace: the schema or table the test made
	Name      string        // the process name recorded with receipts and claims
	Lease     time.Duration // the dispatcher lease (0: the default)
	LookAhead time.Duration // the dispatcher look-ahead window (0: the default)
	// HangAfter: after handling this many messages, print "hung" and
	// block every further handler call, so a kill lands mid-dispatch (0:
	// never; < 0: block every call, holding every row claimed).
	HangAfter int64
}

// Args returns the command-line arguments ParseWorkerSpec reads back.
func (s WorkerSpec) Args() []string {
	return []string{"-space", s.Space, "-name", s.Name, "-lease", s.Lease.String(),
		"-lookahead", s.LookAhead.String(), "-hang-after", fmt.Sprint(s.HangAfter)}
}

// ParseWorkerSpec reads the arguments Args wrote.
func ParseWorkerSpec(args []string) (WorkerSpec, error) {
	var s WorkerSpec
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&s.Space, "space", "", "schema or table of the store")
	fs.StringVar(&s.Name, "name", "p", "process name recorded with receipts and claims")
	fs.DurationVar(&s.Lease, "lease", 0, "dispatcher lease (0: the default)")
	fs.DurationVar(&s.LookAhead, "lookahead", 0, "dispatcher look-ahead window (0: the default)")
	fs.Int64Var(&s.HangAfter, "hang-after", 0, `after this many messages, print "hung" and block (0: never, < 0: at once)`)
	if err := fs.Parse(args); err != nil {
		return s, fmt.Errorf("worker arguments: %w", err)
	}
	if s.Space == "" {
		return s, fmt.Errorf("worker arguments: no -space")
	}
	return s, nil
}

// Receipt is one message a worker handled.
type Receipt struct {
	ID       string
	N        int
	Proc     string    // the worker's name
	Due      time.Time // the envelope's due time
	Received time.Time // stamped by the database's clock when recorded
}

// Claim is one row a worker claimed.
type Claim struct{ ID, Proc string }

// Reexec returns the command that runs this test binary as the worker of
// spec (its TestMain calls Main, which calls WorkerIfAsked).
func Reexec(spec WorkerSpec) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), WorkerEnv+"="+strings.Join(spec.Args(), " "))
	return cmd
}

// ClaimLogger records the IDs of rows a worker claimed, in the test's
// claims table, before its dispatcher sees them: a worker killed after a
// claim has logged every row it could have handed over. A module's worker
// store wraps its ClaimDueOutgoing and ClaimOutgoingAhead with Due and
// Ahead.
type ClaimLogger func(ctx context.Context, ids []string) error

// Due logs the rows of a ClaimDueOutgoing: use as
// log.Due(ctx)(p.ClaimDueOutgoing(...)).
func (l ClaimLogger) Due(ctx context.Context) func([]bus.OutgoingMessage, error) ([]bus.OutgoingMessage, error) {
	return func(msgs []bus.OutgoingMessage, err error) ([]bus.OutgoingMessage, error) {
		if err != nil || len(msgs) == 0 {
			return msgs, err
		}
		return msgs, l.log(ctx, msgs)
	}
}

// Ahead logs the rows of a ClaimOutgoingAhead alike.
func (l ClaimLogger) Ahead(ctx context.Context) func(bus.AheadClaim, error) (bus.AheadClaim, error) {
	return func(claim bus.AheadClaim, err error) (bus.AheadClaim, error) {
		if err != nil || len(claim.Rows) == 0 {
			return claim, err
		}
		return claim, l.log(ctx, claim.Rows)
	}
}

// log retries until it succeeds or ctx ends: a claim whose log failed
// would be a row the test cannot account for.
func (l ClaimLogger) log(ctx context.Context, msgs []bus.OutgoingMessage) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	for {
		err := l(ctx, ids)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
