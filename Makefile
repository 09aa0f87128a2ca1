# Every target loops over the modules of go.work: the root `./...` pattern
# does not reach nested modules.
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTEST_FLAGS ?= -race -count=1 -timeout 12m

.PHONY: test test-core test-faults lint bench tidy quickstart soak soak-recurring

test:
	@set -e; for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && go test $(GOTEST_FLAGS) ./...); \
	done

# The fault-injection tests (on a PostgreSQL cluster of their own and a TCP
# proxy in front of RabbitMQ; see e2e/doc.go). `make test` runs them too.
test-faults:
	cd e2e && go test -race -count=1 -run Fault ./...

test-core:
	go test $(GOTEST_FLAGS) -cover ./...

lint:
	@set -e; out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do echo "== go vet $$m"; (cd $$m && go vet ./...); done
	@go install $(STATICCHECK)
	@set -e; for m in $(MODULES); do echo "== staticcheck $$m"; (cd $$m && "$$(go env GOPATH)/bin/staticcheck" ./...); done

bench:
	go test -run '^$$' -bench . -benchmem ./...
	cd bench && ./run.sh

tidy:
	@set -e; for m in $(MODULES); do (cd $$m && go mod tidy); done

quickstart:
	go run ./examples/quickstart

# The soak with faults (e2e/soak): 22,000 messages over 60 s through three
# worker processes that are killed, stopped and cut off, on RabbitMQ and
# then on NATS; it prints lost, early and duplicates. Not part of `make
# test`. Shorter: make soak SOAK_FLAGS='-n 3000 -duration 15s'.
SOAK_FLAGS ?=
soak:
	@status=0; \
	(cd e2e && go run ./soak -transport rabbitmq $(SOAK_FLAGS)) || status=1; \
	(cd e2e && go run ./soak -transport nats $(SOAK_FLAGS)) || status=1; \
	exit $$status

# The recurring soak (e2e/soak -workload recurring): three worker processes
# declare 1,000 schedules of a second on PostgreSQL for 60 s while one is
# SIGKILLed and started again every 10 s; it prints the ticks expected,
# delivered, lost, duplicated and early, and the lateness. Not part of
# `make test` (a 15 s version is). Shorter:
# make soak-recurring SOAK_FLAGS='-schedules 100 -duration 20s'.
soak-recurring:
	cd e2e && go run ./soak -workload recurring -transport rabbitmq $(SOAK_FLAGS)
