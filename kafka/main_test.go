package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/kafka"
)

// seeds are the addresses of the in-process cluster the tests share; each
// test works under a topic prefix of its own.
var seeds []string

func TestMain(m *testing.M) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	seeds = c.ListenAddrs()
	code := m.Run()
	c.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fastGroups makes group members notice a rebalance quickly.
var fastGroups = []kgo.Opt{
	kgo.HeartbeatInterval(50 * time.Millisecond),
	kgo.SessionTimeout(3 * time.Second),
	kgo.FetchMaxWait(200 * time.Millisecond),
}

// testOptions returns Options under a fresh topic prefix whose topics and
// groups are deleted when the test ends.
func testOptions(t testing.TB, at []string) kafka.Options {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "pbtest." + hex.EncodeToString(b[:])
	t.Cleanup(func() { deleteNamespace(t, at, prefix) })
	consumer := fastGroups
	if os.Getenv("POSTBUS_TEST_KGO_LOG") != "" {
		consumer = append(consumer[:len(consumer):len(consumer)], kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	return kafka.Options{
		TopicPrefix:     prefix,
		Partitions:      4,
		CommitInterval:  100 * time.Millisecond,
		ConsumerOptions: consumer,
		Logger:          drivertest.Logger(),
	}
}

// deleteNamespace deletes the topics and groups under prefix.
func deleteNamespace(t testing.TB, at []string, prefix string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(at...))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Errorf("cleanup: list topics: %v", err)
		return
	}
	var mine []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix+".") {
			mine = append(mine, name)
		}
	}
	if len(mine) > 0 {
		if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
			t.Errorf("cleanup: delete topics: %v", err)
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Errorf("cleanup: list groups: %v", err)
		return
	}
	var gs []string
	for _, g := range groups.Groups() {
		if strings.HasPrefix(g, prefix+".") {
			gs = append(gs, g)
		}
	}
	if len(gs) > 0 {
		_, _ = adm.DeleteGroups(ctx, gs...)
	}
}

// newTransport returns a transport on the shared cluster in a fresh
// namespace, closed when the test ends.
func newTransport(t testing.TB) (*kafka.Transport, kafka.Options) {
	t.Helper()
	opts := testOptions(t, seeds)
	return mustNew(t, seeds, opts), opts
}

func mustNew(t testing.TB, at []string, opts kafka.Options) *kafka.Transport {
	t.Helper()
	tr, err := kafka.New(at, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}
