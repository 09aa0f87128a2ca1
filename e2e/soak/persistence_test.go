package main

import (
	"slices"
	"testing"
)

func TestClientIDsSelectsTheWorkersConnectionsByName(t *testing.T) {
	list := "id=3 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=8 name=postbus-soak-ab-w0 age=1 cmd=evalsha\n" +
		"id=4 addr=127.0.0.1:5001 laddr=127.0.0.1:6379 fd=9 name=postbus-soak-ab-soak age=1 cmd=client|list\n" +
		"id=5 addr=127.0.0.1:5002 laddr=127.0.0.1:6379 fd=10 name= age=1 cmd=xreadgroup\n" +
		"id=6 addr=127.0.0.1:5003 laddr=127.0.0.1:6379 fd=11 name=postbus-soak-ab-w2 age=1 cmd=zrange\n"
	got := clientIDs(list, "postbus-soak-ab-w")
	if want := []string{"3", "6"}; !slices.Equal(got, want) {
		t.Fatalf("clientIDs = %v, want %v", got, want)
	}
}

func TestCheckPersistenceRefusesWhatNeedsPostgreSQL(t *testing.T) {
	base := config{transport: transportRedis, persistence: persistenceRedis, workload: workloadMessages}
	if err := checkPersistence(base); err != nil {
		t.Fatalf("redis on redis: %v", err)
	}
	for name, c := range map[string]config{
		"outbox":    {transport: transportRabbitMQ, persistence: persistenceRedis, workload: workloadMessages, outbox: true},
		"transport": {transport: transportPostgres, persistence: persistenceRedis, workload: workloadMessages},
		"sample":    {transport: transportRedis, persistence: persistenceRedis, workload: workloadMessages, sample: 1},
		"recurring": {transport: transportRedis, persistence: persistenceRedis, workload: workloadRecurring},
		"unknown":   {transport: transportRedis, persistence: "mongodb", workload: workloadMessages},
	} {
		if err := checkPersistence(c); err == nil {
			t.Errorf("%s: checkPersistence accepted %+v", name, c)
		}
	}
	if err := checkPersistence(config{transport: transportPostgres, persistence: persistencePostgres, outbox: true}); err != nil {
		t.Fatalf("postgres with the outbox: %v", err)
	}
}
