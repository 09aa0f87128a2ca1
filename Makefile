# Every target loops over the modules of go.work: the root `./...` pattern
# does not reach nested modules.
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTEST_FLAGS ?= -race -count=1 -timeout 12m

.PHONY: test test-core test-faults fuzz fuzz-short lint bench tidy quickstart soak soak-emulators soak-long soak-recurring release-check release apidiff dist

# The release tool (tools/release, a module of its own so the core keeps to
# the standard library). docs/guide/installing.md says how releases work.
RELEASE := go run ./tools/release

test:
	@set -e; for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && go test $(GOTEST_FLAGS) ./...); \
	done
	@$(MAKE) --no-print-directory fuzz-short

# The fuzz targets of what each transport reads from the wire, as
# folder:Target (go test takes one -fuzz target at a time). `make fuzz`
# runs each for FUZZTIME; `make test` runs each for FUZZTIME_SHORT. New
# failing inputs land in the folder's testdata/fuzz/, where they stay as
# regression seeds.
FUZZ_TARGETS := nats:FuzzDecodeMsg kafka:FuzzDecodeRecordHeaders sqs:FuzzDecode \
	redis:FuzzDecodeEntry postgres:FuzzDecodeRow rabbitmq:FuzzFromDelivery
FUZZTIME ?= 2m
FUZZTIME_SHORT ?= 5s

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		d=$${t%%:*}; f=$${t##*:}; \
		echo "== fuzz $$d $$f for $(FUZZTIME)"; \
		(cd $$d && go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) .); \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

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

# go mod tidy outside the workspace, as users build: the other modules at
# VERSION are served from a proxy folder built from the working tree.
# TIDY='postgres console' tidies only those modules.
TIDY ?=
tidy:
	$(RELEASE) tidy $(TIDY)

# Every module zipped at VERSION into a module proxy folder, then, in a
# folder outside the repository, a fresh app gets the core and every
# driver, builds, vets and runs; go install builds the CLI at VERSION.
release-check:
	$(RELEASE) release-check

# make release VERSION=vX.Y.Z: set VERSION and every requirement of the
# set, check the result, and print the tags to create. Nothing is
# committed, tagged or pushed.
release:
	@case "$(origin VERSION)" in command*) ;; *) echo "usage: make release VERSION=vX.Y.Z"; exit 2;; esac
	$(RELEASE) bump $(VERSION)
	$(RELEASE) release-check
	@echo "Commit, then create these tags on that commit (and push them):"
	@$(RELEASE) tags

# Exported API changes of each module since the last release (a version
# tag, else the last commit that changed VERSION; BASE=ref to choose), and
# the version the next release needs.
BASE ?=
apidiff:
	$(RELEASE) apidiff $(BASE)

# The postbus CLI for linux, darwin and windows on amd64 and arm64, as
# archives with checksums in dist/ (not committed).
dist:
	$(RELEASE) dist dist

quickstart:
	go run ./examples/quickstart

# The soak with faults (e2e/soak): 22,000 messages over 60 s through three
# worker processes that are killed, stopped and cut off, on RabbitMQ, NATS,
# Redis Streams and the PostgreSQL transport, then with the transactional
# outbox on RabbitMQ and on the PostgreSQL transport (exactly one business
# row and one event row per message), then on Redis alone (the Redis Streams
# transport and the Redis persistence); it prints lost, early and duplicates.
# Not part of `make test`. Shorter: make soak SOAK_FLAGS='-n 3000 -duration 15s'.
# docs/reliability.md says what each run does and what it found.
SOAK_FLAGS ?=
soak:
	@status=0; \
	for t in rabbitmq nats redis postgres; do \
		(cd e2e && go run ./soak -transport $$t $(SOAK_FLAGS)) || status=1; \
	done; \
	for t in rabbitmq postgres; do \
		(cd e2e && go run ./soak -transport $$t -outbox $(SOAK_FLAGS)) || status=1; \
	done; \
	(cd e2e && go run ./soak -transport redis -persistence redis $(SOAK_FLAGS)) || status=1; \
	exit $$status

# The same soak on the emulators the soak starts itself: Kafka on kfake (in
# the soak process: no broker cut, nothing durable) and SQS/SNS on goaws.
soak-emulators:
	@status=0; \
	for t in kafka sqs; do \
		(cd e2e && go run ./soak -transport $$t $(SOAK_FLAGS)) || status=1; \
	done; \
	exit $$status

# The long soak: 30 minutes at 50 messages a second on RabbitMQ with the
# outbox, one fault a minute, each worker's memory, goroutines, open files
# and the database connections and table rows sampled every 10 s; it fails
# on growth that does not level off. Shorter:
# make soak-long SOAK_LONG_FLAGS='-duration 5m -n 15000 -fault-every 30s -retention 1m'
SOAK_LONG_FLAGS ?=
soak-long:
	cd e2e && go run ./soak -transport rabbitmq -outbox -duration 30m -n 90000 -fault-every 1m \
		-sample 10s -retention 5m $(SOAK_LONG_FLAGS)

# The recurring soak (e2e/soak -workload recurring): three worker processes
# declare 1,000 schedules of a second on PostgreSQL for 60 s while one is
# SIGKILLed and started again every 10 s; it prints the ticks expected,
# delivered, lost, duplicated and early, and the lateness. Not part of
# `make test` (a 15 s version is). Shorter:
# make soak-recurring SOAK_FLAGS='-schedules 100 -duration 20s'.
soak-recurring:
	cd e2e && go run ./soak -workload recurring -transport rabbitmq $(SOAK_FLAGS)
