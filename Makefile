# Lily: the two set-up commands are `make demo` and `make test` (see README.md);
# `make` alone runs `make help`, which lists every target and changes nothing.
GO          ?= go
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
EXAMPLE     := examples/orders/orders.lily.yaml
# The schema of the runtime's broker tests: they publish and consume through its generated code.
LILYTEST    := runtime/internal/fixture/fixture.lily.yaml
SCHEMAS     := $(EXAMPLE) $(LILYTEST)

# Starts the local RabbitMQ when it is installed but stopped, as .ci/run does,
# unless LILY_AMQP_URL names another broker.
LOCAL_BROKER = @[ -n "$$LILY_AMQP_URL" ] || .ci/services rabbitmq
# The same for the local PostgreSQL (the demo's checkout and outbox), unless LILY_PG_DSN names another.
LOCAL_PG = @[ -n "$$LILY_PG_DSN" ] || .ci/services postgresql

# The three-node RabbitMQ cluster of the cluster ledger, beside the machine's broker.
CLUSTER     := .ci/cluster
# A recipe starts the cluster, and it comes down however the recipe ends: a
# failed start, a failed test, or an interrupt. A cluster already up (make
# cluster-up, another recipe's) is used and left up: it is not this recipe's
# to take down.
CLUSTER_UP = if $(CLUSTER) running; then echo "cluster already up, left up: $$($(CLUSTER) urls)"; \
	else trap '$(CLUSTER) down' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; $(CLUSTER) up; fi

.PHONY: help demo demo-clean test unit generate check lint staticcheck mongo otel bench bench-replay fuzz soak \
	cluster-up cluster-down cluster-test soak-cluster

# The first target, so the default goal: it lists the others from their ## lines.
## help: list the targets and what each does (what a bare make runs)
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); i = index($$0, ":"); printf "%-14s%s\n", substr($$0, 1, i - 1), substr($$0, i + 1) }' $(firstword $(MAKEFILE_LIST))

## demo: regenerate the example's and the runtime tests' code (make generate), then run the example against RabbitMQ and PostgreSQL on localhost (started if stopped): it declares its 9 queues, the shop.events exchange and the PostgreSQL schema lily_demo (make demo-clean deletes them)
demo: generate
	$(LOCAL_BROKER)
	$(LOCAL_PG)
	$(GO) run ./examples/orders -demo

## demo-clean: delete the demo's queues (their retry buckets and DLQs), the shop.events exchange and the PostgreSQL schema lily_demo
demo-clean:
	$(LOCAL_BROKER)
	$(LOCAL_PG)
	$(GO) run ./examples/orders -clean

## test: formatting, vet, staticcheck, stale generated code, then every test (RabbitMQ, PostgreSQL, node and npm required), then the cluster ledger
test: lint check mongo otel
	@# The broker tests mostly wait (for a broker, a deadline, a redelivery):
	@# at go test's defaults on two cores, two packages of two tests each,
	@# they kept about one core busy. Four of each keep it busier and end
	@# sooner. The two longest packages are named first, so that go test
	@# starts them first and the others fill in beside them.
	$(GO) test -race -count=1 -p 4 -parallel 4 -timeout 20m ./runtime ./cmd/lilydlq ./...
	@# Tests that change broker-wide settings for a moment run alone, last.
	LILY_BROKER_SETTINGS_TESTS=1 $(GO) test -count=1 -run BrokerSettings ./runtime
	$(MAKE) cluster-test

## cluster-up: start three RabbitMQ nodes, clustered, beside the machine's broker (ports 5681-5683; .ci/cluster says more)
cluster-up:
	$(CLUSTER) up

## cluster-down: stop the three nodes and delete their data (the machine's broker is left alone)
cluster-down:
	$(CLUSTER) down

## cluster-test: the runtime's cluster tests, then the short ledger, on the cluster, which it starts and tears down (part of make test; about 3 minutes)
cluster-test:
	@$(CLUSTER_UP) && \
		LILY_CLUSTER_URLS=$$($(CLUSTER) urls) $(GO) test -count=1 -v -run '^TestCluster' ./runtime && \
		LILY_CLUSTER_URLS=$$($(CLUSTER) urls) $(GO) test -count=1 -v -run 'TestLedgerCluster$$' ./ledger

## unit: every test that needs no RabbitMQ or PostgreSQL (go test -short; well under a minute)
unit:
	$(GO) test -short -count=1 ./...

## mongo: the MongoDB inbox is its own module; its tests run only where LILY_MONGO_URL names a replica set
mongo: staticcheck
	cd inbox/mongoinbox && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -count=1 -v ./...

## otel: the OpenTelemetry telemetry is its own module; its tests run against RabbitMQ (started if stopped)
otel: staticcheck
	$(LOCAL_BROKER)
	cd telemetry/lilyotel && $(GO) vet ./... && $(STATICCHECK) ./... && $(GO) test -race -count=1 ./...

## generate: run lilygen on the example's schema and on the runtime tests' schema
generate:
	$(GO) run ./cmd/lilygen generate $(SCHEMAS)

## check: fail when the generated code of either schema is stale
check:
	$(GO) run ./cmd/lilygen check $(SCHEMAS)

## lint: the runtime's public names under their limits (internal/apicount), gofmt, go vet and staticcheck, on the library and on bench/
lint: staticcheck
	$(GO) run ./internal/apicount
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(STATICCHECK) ./...

## bench: the figures docs/benchmarks.md's targets rest on: the replay's (bench-replay); the broker runs with issue 18's settings, five alternated rounds each (ack and retry: plain, plain-extract, plain-facts, Lily and Watermill; ack again: plain-extract, plain-batch and Lily; live, a steady 3,000 msg/s: plain, Lily and Watermill); the publisher's on the broker, the extractor's, lilygen's (about 25 minutes)
bench: bench-replay
	cd bench && $(GO) run . -scenarios ack,retry -rounds 5 -n 60000 -retry-n 20000 -consumers plain,plain-extract,plain-facts,lily,watermill
	cd bench && $(GO) run . -scenarios ack -rounds 5 -n 60000 -consumers plain-extract,plain-batch,lily
	cd bench && $(GO) run . -scenarios live -rounds 5 -consumers plain,lily,watermill
	cd bench && $(GO) test -run '^$$' -bench 'Publish/to=broker' -benchtime 30000x -count 5 .
	bench=$$(mktemp -d)/bench.test && trap 'rm -r "$${bench%/*}"' EXIT && cd bench && \
	$(GO) test -c -o $$bench . && $(call ROUNDS,10,,$(EXTRACT_BENCHES)) && \
	GOEXPERIMENT=jsonv2 $(GO) test -c -o $$bench . && $(call ROUNDS,10,,$(EXTRACT_V2_BENCHES))
	$(GO) test -run '^$$' -bench Generate -count 10 ./gen

## bench-replay: consumers, publishers, the outbox relay and 100 queues without a broker, deliveries replayed, in alternated rounds (docs/benchmarks.md; about 6 minutes; the relay needs PostgreSQL)
bench-replay:
	bench=$$(mktemp -d)/bench.test && trap 'rm -r "$${bench%/*}"' EXIT && cd bench && \
	$(GO) test -c -o $$bench . && \
	$(call ROUNDS,6,-test.benchtime 50000x -test.cpu $(REPLAY_CPUS),$(REPLAY_BENCHES)) && \
	$(call ROUNDS,6,-test.benchtime 50000x -test.cpu $(REPLAY_CPUS),$(PUBLISH_BENCHES)) && \
	$(call ROUNDS,3,-test.benchtime 20000x,$(MANY_BENCHES))

# The benchmarks of bench-replay, each a whole name.
REPLAY_BENCHES  := $(addprefix Replay/path=ack/consumer=,plain plain-extract plain-batch plain-duties lily watermill) \
	$(addprefix Replay/path=retry/consumer=,plain plain-facts lily watermill)
PUBLISH_BENCHES := $(addprefix Publish/to=replay/publisher=,plain lily watermill)
MANY_BENCHES    := $(addprefix ManyQueues/consumer=,plain lily lily-shared watermill) Relay
REPLAY_CPUS     := 2,1
# The extractor's against its peers (make bench); encoding/json/v2's in a build of their own.
EXTRACT_PAYLOADS   := 1KiB example
EXTRACT_BENCHES    := $(foreach p,$(EXTRACT_PAYLOADS),$(addprefix Extract/payload=$(p)/decoder=,generated easyjson encoding-json segmentio sonic))
EXTRACT_V2_BENCHES := $(foreach p,$(EXTRACT_PAYLOADS),$(addprefix Extract/payload=$(p)/decoder=,generated encoding-json-v2))

# ROUNDS runs the test binary $$bench in $(1) alternated rounds: each round
# runs each benchmark of $(3) once (-test.count 1, and the flags $(2)), the
# order rotated one place a round, so that a drift of the shared machine
# spreads over all of them. go test -count would run each benchmark's runs
# one after another. The binary run alone has no timeout of its own, which
# go test would give it: a consumer that never settles its last message ends
# the recipe at 10 minutes, not never.
ROUNDS = set -- $(3) && for round in $$(seq $(1)); do \
		for b; do $$bench -test.run '^$$' -test.bench "^Benchmark$$b\$$" -test.count 1 -test.timeout 10m $(2) || exit; done; \
		b=$$1; shift; set -- "$$@" "$$b"; \
	done

## staticcheck: install staticcheck v0.8.2 into GOPATH/bin when it is not there (lint, mongo and otel run it)
staticcheck:
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

FUZZTIME ?= 30s
FUZZ_TARGETS := internal/quarantine:FuzzFilter internal/quarantine:FuzzClient internal/quarantine:FuzzRepeated internal/quarantine:FuzzBrokenXDeath runtime/internal/guard:FuzzGuard runtime/internal/guard:FuzzStructuredEvent runtime/internal/guard:FuzzForeignHeaders internal/sanitize:FuzzSanitize internal/sanitize:FuzzName wire:FuzzJSONReader wire:FuzzMemberText schema:FuzzParse gen:FuzzGenerate \
	examples/orders/ordersmsg:FuzzExtractOrderPlacedV1 examples/orders/ordersmsg:FuzzExtractOrderPlacedV2

## fuzz: run each fuzz target for FUZZTIME (30s unless set; make test runs their corpora as seeds)
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} (./$${t%%:*}) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) ./$${t%%:*}; \
	done

## soak: the 100,000-message ledger under random faults (docs/reliability.md)
soak:
	$(GO) run ./ledger/cmd/soak -n 100000

## soak-cluster: the 100,000-message ledger on the cluster, nodes stopped, killed and restarted in turn (starts and tears down the cluster)
soak-cluster:
	@$(CLUSTER_UP) && \
		$(GO) run ./ledger/cmd/soak -n 100000 -publish-over 10m -fault-every 5s -restart -cluster "$$($(CLUSTER) urls)"
