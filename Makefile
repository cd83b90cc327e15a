# Each target's "##" comment is its line in `make help`.

# Real servers come from the environment or the command line, as for go test:
# make test RELAY_TEST_REDIS_URL=redis://127.0.0.1:6379/0 runs the real-Redis
# tests too, and `make bench` then benchmarks on that Redis (without it, the
# package benchmarks that need one skip and relay bench runs on miniredis).

# Which package benchmarks `make bench` runs, for how long, and how often.
BENCH ?= .
BENCHPKG ?= ./...
BENCHTIME ?= 1s
COUNT ?= 1
# Flags of `relay bench`, e.g. BENCHFLAGS='-n 5000 -phases e2e'.
BENCHFLAGS ?=

.DEFAULT_GOAL := help
.PHONY: help test ci lint fuzz bench console-screenshots

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# hookverify and relayclient are modules of their own (go.work), which ./...
# does not enter.
PKGS := ./... ./hookverify/... ./relayclient/...

test: ## go test -race: every package under the race detector, slower than go test (real servers from RELAY_TEST_*)
	go test -race $(PKGS)

ci: ## everything CI does: real Redis and Cluster, lint, fuzz, tests, the Helm chart's test (.ci/run)
	bash .ci/run

lint: ## gofmt check, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet $(PKGS)
	go tool staticcheck $(PKGS)

fuzz: ## each Fuzz target briefly, as CI does (FUZZTIME=20000x inputs each)
	bash .ci/fuzz

bench: ## package benchmarks (BENCH, BENCHPKG, BENCHTIME, COUNT), then relay bench (BENCHFLAGS)
	go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(COUNT) $(BENCHPKG)
	go run ./cmd/relay bench -redis '$(RELAY_TEST_REDIS_URL)' $(BENCHFLAGS)

console-screenshots: ## the README's console screenshots (docs/images) from the Chromium test (needs chromium and npm ci in cmd/relay/testdata/console)
	npm ci --prefix cmd/relay/testdata/console
	mkdir -p docs/images
	RELAY_CONSOLE_README_DIR=$(CURDIR)/docs/images RELAY_TEST_REQUIRE_REAL= go test ./cmd/relay -run '^TestConsoleInChromium$$/^embedded$$' -count=1
