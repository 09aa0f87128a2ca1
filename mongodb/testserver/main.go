// Command testserver runs an embedded FerretDB v1 (a MongoDB wire-protocol
// server written in Go) on loopback, for the mongodb package's tests when no
// MongoDB server is available. It lives in its own module so FerretDB's
// dependencies never reach users of github.com/postbus/bus/mongodb.
//
// It prints the connection URI as its first line on stdout, then serves until
// it receives SIGINT or SIGTERM, or until its standard input is closed (so it
// never outlives the test process that started it).
//
//	testserver -listen 127.0.0.1:0 -handler sqlite -dir /tmp/data
//	testserver -handler postgresql -postgresql-url postgres://root@127.0.0.1:5432/pb_1 -own-database
//
// With -own-database the PostgreSQL database named in the URL is created at
// start and dropped at exit, so concurrent test runs never share FerretDB
// metadata.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/jackc/pgx/v5"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "TCP address to listen on; port 0 picks a free port")
	handler := flag.String("handler", "sqlite", "FerretDB handler: sqlite or postgresql")
	dir := flag.String("dir", "", "sqlite data folder; empty: a temporary folder removed on exit")
	pgURL := flag.String("postgresql-url", "postgres://root@127.0.0.1:5432/test", "PostgreSQL URL for the postgresql handler")
	ownDB := flag.Bool("own-database", false, "postgresql: create the URL's database at start and drop it at exit")
	logLevel := flag.String("log-level", "warn", "log level: debug, info, warn, error")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: *listen},
		Logger:   logger,
		Handler:  *handler,
	}
	switch *handler {
	case "sqlite":
		d := *dir
		if d == "" {
			tmp, err := os.MkdirTemp("", "postbus-ferretdb-")
			if err != nil {
				return fmt.Errorf("temp dir: %w", err)
			}
			defer os.RemoveAll(tmp)
			d = tmp
		}
		cfg.SQLiteURL = "file:" + d + "/"
	case "postgresql":
		cfg.PostgreSQLURL = *pgURL
		if *ownDB {
			drop, err := createDatabase(*pgURL)
			if err != nil {
				return err
			}
			defer drop()
		}
	default:
		return fmt.Errorf("unknown handler %q", *handler)
	}

	f, err := ferretdb.New(cfg)
	if err != nil {
		return fmt.Errorf("ferretdb: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// Standard input closes when the parent process exits or closes the pipe.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	fmt.Println(f.MongoDBURI()) // blocks until the listener is up
	return <-done
}

// createDatabase creates the database named in url, connecting to the
// server's "postgres" database to do it, and returns a function that drops it.
func createDatabase(url string) (func(), error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgresql url: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil, fmt.Errorf("-own-database needs a database name in the URL other than postgres")
	}
	cfg.Database = "postgres"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgresql: %w", err)
	}
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+quoted); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	_ = conn.Close(ctx)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testserver: drop database:", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)"); err != nil {
			fmt.Fprintln(os.Stderr, "testserver: drop database:", err)
		}
	}, nil
}
