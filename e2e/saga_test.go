package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
)

// The saga worker's messages, with the names it gives them.
type (
	sagaStep struct {
		Instance string
		N, Of    int
	}
	sagaStepsDone struct {
		Instance string
		Seen     []int
	}
)

func (sagaStep) MessageName() string      { return "e2e.saga.Step" }
func (sagaStepsDone) MessageName() string { return "e2e.saga.StepsDone" }

// TestSagaTwoProcessesOneKilled runs a saga in two worker processes on
// PostgreSQL (outbox on) and RabbitMQ, and SIGKILLs one of them while it
// handles steps. Every instance still sees each of its steps exactly once
// (no step is applied to stale state, none twice, none lost), asks for its
// timeout, and completes.
func TestSagaTwoProcessesOneKilled(t *testing.T) {
	t.Parallel()
	const instances, steps = 100, 10
	k := rabbitKit(t)
	pool := newPool(t, 10)
	schema := freshSchema(t, pool)
	store := newStore(t, pool, schema)
	collector := k.endpoint + "-done"
	t.Cleanup(func() { deleteRabbitTopology(t, "", collector) })

	var mu sync.Mutex
	done := map[string][]sagaStepsDone{} // by instance
	ids := map[string]string{}           // StepsDone message ID -> instance
	c := k.config(k.newTransport(t, ""), store)
	c.Endpoint = collector
	sender := startBus(t, c, func(b *bus.Bus) { // its Start creates the tables first
		_ = bus.Handle(b, func(ctx context.Context, m sagaStepsDone) error {
			mu.Lock()
			defer mu.Unlock()
			id := bus.IncomingMessage(ctx).ID
			if _, dup := ids[id]; !dup { // a redelivery of one message is not a second completion
				ids[id] = m.Instance
				done[m.Instance] = append(done[m.Instance], m)
			}
			return nil
		})
	})

	bin := filepath.Join(t.TempDir(), "sagaworker")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/sagaworker").CombinedOutput(); err != nil {
		t.Fatalf("go build sagaworker: %v\n%s", err, out)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-schema", schema, "-endpoint", k.endpoint, "-exchange", k.endpoint+"-events", "-collector", collector)
		cmd.Env = append(os.Environ(), "POSTBUS_TEST_POSTGRES_URL="+postgresURL(), "POSTBUS_TEST_RABBITMQ_URL="+rabbitURL())
		cmd.Stderr = t.Output()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ready := make(chan bool, 1)
		go func() { ready <- bufio.NewScanner(stdout).Scan() }()
		select {
		case ok := <-ready:
			if !ok {
				t.Fatal("a saga worker exited before it was ready")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a saga worker was not ready within 60s")
		}
		return cmd
	}
	victim, survivor := start(), start()

	all := make([]sagaStep, 0, instances*steps)
	for i := range instances {
		for n := range steps {
			all = append(all, sagaStep{Instance: fmt.Sprintf("i%03d", i), N: n, Of: steps})
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, m := range all {
		if err := sender.Send(ctxT(t, 30*time.Second), m, bus.To(k.endpoint)); err != nil {
			t.Fatal(err)
		}
	}
	// Kill one worker once a fifth of the steps committed: it has
	// handlings in flight, whose transactions die with it.
	drivertest.Eventually(t, 60*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{schema, "outgoing_messages_inbox"}.Sanitize()).Scan(&n)
		return n >= len(all)/5
	}, "a fifth of the steps handled")
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	t.Log("one worker killed with a fifth of the steps handled")

	drivertest.Eventually(t, 120*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == instances
	}, "every instance to complete")
	time.Sleep(500 * time.Millisecond) // a second completion would arrive by now
	mu.Lock()
	defer mu.Unlock()
	for inst, reports := range done {
		if len(reports) != 1 {
			t.Errorf("instance %s completed %d times", inst, len(reports))
		}
		seen := slices.Sorted(slices.Values(reports[0].Seen))
		if !slices.Equal(seen, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("instance %s saw steps %v: a step was lost, doubled or applied to stale state", inst, reports[0].Seen)
		}
	}
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{schema, "outgoing_messages_sagas"}.Sanitize()).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d saga instances left after every instance completed", left)
	}
	waitStoreEmpty(t, pool, store.Table())
	if err := survivor.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := survivor.Wait(); err != nil {
		t.Errorf("the surviving worker did not stop cleanly: %v", err)
	}
}
