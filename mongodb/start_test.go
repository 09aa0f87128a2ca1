package mongodb_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mongodb"
)

// startTimeout is the StartTimeout of the start-up tests whose store comes
// up late: generous, since the machine is shared.
const startTimeout = 20 * time.Second

// serverHost returns the host:port of the test server.
func serverHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testEnv.uri)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// storeAt returns a store on fresh collections (dropped at cleanup) whose
// client dials addr directly, as user when not nil. The client gives up selecting a server
// after 1 s, shorter than the default 30 s, so a store that comes up 3 s
// late makes Setup fail before it is up: Start must retry.
func storeAt(t *testing.T, addr string, user *url.Userinfo) *mongodb.Persistence {
	t.Helper()
	u, err := url.Parse(testEnv.uri)
	if err != nil {
		t.Fatal(err)
	}
	u.Host, u.User = addr, user
	client, err := mongo.Connect(options.Client().ApplyURI(u.String()).
		SetDirect(true).SetServerSelectionTimeout(time.Second).SetConnectTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	name := randomName("start_")
	dropCollections(t, name)
	p, err := mongodb.New(client.Database(testDatabase), mongodb.Options{Collection: name})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dropCollections drops the collections of a store on name at cleanup,
// through the shared client.
func dropCollections(t *testing.T, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := testEnv.client.Database(testDatabase)
		for _, s := range []string{"", "_claims", "_failed", "_sagas", "_recurring"} {
			_ = db.Collection(name + s).Drop(ctx)
		}
	})
}

// Start with a server that comes up 3 s after it waits for it and
// succeeds, logging the unreachable store once at Warn.
func TestStartWaitsForServerThatComesUpLate(t *testing.T) {
	t.Parallel()
	addr := drivertest.LateService(t, serverHost(t), 3*time.Second)
	drivertest.WantStartWaits(t, storeAt(t, addr, nil), addr, 3*time.Second, startTimeout)
}

// Start with a server that never comes up fails after StartTimeout with an
// error matching bus.ErrStoreUnavailable.
func TestStartGivesUpOnUnreachableServer(t *testing.T) {
	t.Parallel()
	drivertest.WantStartUnavailable(t, storeAt(t, bustest.DeadAddr(t), nil), 2*time.Second)
}

// Start fails at once, without bus.ErrStoreUnavailable, when the server
// refuses what it is asked: credentials it does not accept, an index of
// Setup's name that exists with other keys (a schema error).
func TestStartFailsAtOnceOnPermanentErrors(t *testing.T) {
	t.Parallel()
	t.Run("authentication failed", func(t *testing.T) {
		t.Parallel()
		p := storeAt(t, serverHost(t), url.UserPassword("pbtest_nobody", "pbtest-wrong"))
		drivertest.WantStartFailsAtOnce(t, p, startTimeout, "AuthenticationFailed")
	})
	t.Run("index conflict", func(t *testing.T) {
		t.Parallel()
		indexConflict(t)
	})
}

func indexConflict(t *testing.T) {
	p := storeAt(t, serverHost(t), nil)
	_, err := testEnv.client.Database(testDatabase).Collection(p.Collection().Name()).Indexes().CreateOne(t.Context(),
		mongo.IndexModel{Keys: bson.D{{Key: "other", Value: 1}}, Options: options.Index().SetName("postbus_transport_available_due")})
	if err != nil {
		t.Fatalf("create the conflicting index: %v", err)
	}
	err = drivertest.WantStartFailsAtOnce(t, p, startTimeout, "postbus_transport_available_due")
	if err != nil && !strings.Contains(err.Error(), "mongodb: setup") {
		t.Errorf("Start = %v, want the store's setup error", err)
	}
}
