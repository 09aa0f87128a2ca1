package e2e_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postbus/bus"
	"github.com/postbus/bus/kafka"
)

// kafkaKit returns a namespace (a topic prefix of its own) on the
// in-process Kafka cluster at addr, which the test started.
func kafkaKit(t testing.TB, addr string) *kit {
	t.Helper()
	s := suffix()
	k := &kit{
		name: "kafka", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter",
	}
	k.newTransport = func(t testing.TB, override string) bus.Transport {
		t.Helper()
		a := addr
		if override != "" {
			a = override
		}
		tr, err := kafka.New([]string{a}, kafka.Options{
			TopicPrefix:    "pbe2e." + s,
			Partitions:     4,
			CommitInterval: 100 * time.Millisecond,
			// A due message waits in the store, not in a produce.
			PublishTimeout: 2 * time.Second,
			Logger:         quietLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}
	return k
}

// startKafka starts an in-process Kafka cluster (kfake) on port (0: a free
// one) that keeps its data in dir, and returns it with its port.
func startKafka(t testing.TB, dir string, port int) (*kfake.Cluster, int) {
	t.Helper()
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir))
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	return c, port
}

// kafkaOutage runs an in-process cluster whose data lives in a temporary
// directory; the outage closes it and starts it again on the same port and
// data.
func kafkaOutage(t testing.TB) outage {
	dir := t.TempDir()
	c, port := startKafka(t, dir, 0)
	t.Cleanup(func() { c.Close() })
	return outage{
		addr: "127.0.0.1:" + strconv.Itoa(port),
		cut:  func(testing.TB) { c.Close() },
		restore: func(t testing.TB) {
			c, _ = startKafka(t, dir, port)
		},
	}
}

func TestDelayedTwoInstancesKafka(t *testing.T) {
	t.Parallel()
	c, port := startKafka(t, t.TempDir(), 0)
	t.Cleanup(c.Close)
	delayedTwoInstances(t, kafkaKit(t, "127.0.0.1:"+strconv.Itoa(port)))
}

// TestBrokerOutageKafka: the Kafka cluster is stopped while scheduled
// messages fall due; they wait in the PostgreSQL store and are delivered,
// none early, once the cluster is back.
func TestBrokerOutageKafka(t *testing.T) {
	t.Parallel()
	o := kafkaOutage(t)
	brokerOutage(t, kafkaKit(t, o.addr), o)
}
