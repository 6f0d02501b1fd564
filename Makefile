# LPU node stack. `make demo` runs the demo on a simulated LPU node;
# `make test` runs every check CI runs (also what .ci/run calls).
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin
# FUZZTIME= overrides each fuzz target's smoke budget (test/check.sh), e.g. 60s.
FUZZTIME ?=

.PHONY: all build test unit lint bench fuzz-smoke e2e e2e-dra demo demo-dra sim clean

all: build

build: ## build both daemons into bin/
	CGO_ENABLED=0 go build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/lpu-device-plugin ./cmd/lpu-nri

test: ## everything CI runs: tools, lint, unit tests with -race, fuzz smoke, end-to-end
	bash test/check.sh all

unit: ## unit and integration tests only
	bash test/check.sh unit

lint: ## gofmt, go vet, staticcheck
	bash test/check.sh lint

fuzz-smoke: ## each fuzz target briefly (a fixed execution count; FUZZTIME=60s to override)
	FUZZTIME=$(FUZZTIME) bash test/check.sh fuzz

bench: ## Go benchmarks of the hot paths
	go test -run '^$$' -bench . -benchmem ./pkg/... ./cmd/...

e2e: ## end-to-end scenarios on a real kubelet + containerd + podman, then the DRA cluster ones (root)
	bash test/e2e/run.sh all
	bash test/e2e/run.sh dra

e2e-dra: ## the DRA scenarios on a real single-node cluster (root)
	bash test/e2e/run.sh dra

demo: ## scenario 1 on a simulated LPU node, printed readably (root)
	bash test/e2e/run.sh demo

demo-dra: ## DRA arcs on a real single-node cluster: what each pod sees, a ring picture (root)
	bash test/e2e/run.sh demo-dra

sim: ## allocation-quality simulator
	go run ./test/sim

clean:
	rm -rf $(BIN) test/sim/out
