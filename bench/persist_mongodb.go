package main

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	mongooptions "go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mongodb"
)

// mongodbDriver stores each run in its own database, bench_<run>, dropped
// by the owner at the end. No MongoDB server is packaged for this machine:
// point -mongodb-uri at one, or at the FerretDB test server of the mongodb
// module (see docs/benchmarks.md).
func mongodbDriver() persistenceDriver {
	return persistenceDriver{
		shared:      true,
		storeCost:   500 * time.Microsecond,
		serverProcs: []string{"mongod", "testserver"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error) {
			client, err := mongo.Connect(mongooptions.Client().ApplyURI(o.mongodbURI).SetAppName("postbus-bench-" + run))
			if err != nil {
				return nil, nil, fmt.Errorf("connect: %w", err)
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := client.Ping(pctx, nil); err != nil {
				_ = client.Disconnect(context.Background())
				return nil, nil, fmt.Errorf("connect %s: %w", o.mongodbURI, err)
			}
			db := client.Database("bench_" + run)
			p, err := mongodb.New(db, mongodb.Options{Logger: o.logger})
			if err != nil {
				_ = client.Disconnect(context.Background())
				return nil, nil, err
			}
			cleanup := func() {
				cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if owner {
					if err := db.Drop(cctx); err != nil {
						o.logger.Error("cannot drop the run's database", "database", db.Name(), "error", err)
					}
				}
				_ = client.Disconnect(cctx)
			}
			return p, cleanup, nil
		},
	}
}
