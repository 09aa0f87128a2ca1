# Every target loops over the modules of go.work: the root `./...` pattern
# does not reach nested modules.
MODULES := $(shell go list -m -f '{{.Dir}}' 2>/dev/null)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTEST_FLAGS ?= -race -count=1 -timeout 12m

.PHONY: test test-core test-faults lint bench tidy quickstart

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
