# LPU node stack. `make demo` runs the demo on a simulated LPU node;
# `make test` runs every check CI runs (also what .ci/run calls).
SHELL := /bin/bash
# The release version: VERSION (the file) unless VERSION=x.y.z is given; a
# leading v is dropped (deploy/version.sh), so --version, the image tag and the
# chart always agree.
override VERSION := $(shell bash deploy/version.sh $(VERSION))
ifeq ($(VERSION),)
$(error VERSION must be SemVer x.y.z (see deploy/version.sh))
endif
LDFLAGS := -X main.version=$(VERSION)
BIN := bin
# FUZZTIME= overrides each fuzz target's smoke budget (test/check.sh), e.g. 60s.
FUZZTIME ?=

.PHONY: all build version release test unit lint bench fuzz-smoke e2e e2e-dra e2e-security demo demo-dra demo-orion clean

all: build

# Static, without symbol tables and file paths, as the image is built
# (deploy/container/build-oci.sh). grpcnotrace keeps gRPC from linking
# golang.org/x/net/trace, whose html/template makes the linker keep every
# exported method of every linked type: lpu-dra is 26 MiB smaller and idles
# 14 MiB smaller (docs/benchmarks/binaries.md, docs/benchmarks/dra.md).
build: ## build the daemons and the kubectl lpu plugin into bin/
	CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/ ./cmd/lpu-device-plugin ./cmd/lpu-nri ./cmd/lpu-dra ./cmd/kubectl-lpu

version: ## print the version every artefact carries
	@echo $(VERSION)

# Installs what it needs first (helm into the e2e tool cache; umoci and jq
# through build-oci.sh), as `make test` and `make demo` do.
release: ## dist/: multi-arch OCI image, chart (.tgz and OCI artifact), manifests, kubectl-lpu archives and krew manifest, SBOMs, SHA256SUMS
	bash test/e2e/tools.sh helm
	HELM=$$(bash test/e2e/tools.sh path | tr ':' '\n' | grep helm)/helm bash deploy/release.sh $(VERSION)

test: ## everything CI runs: tools, lint, unit tests with -race, fuzz smoke, end-to-end
	bash test/check.sh all

unit: ## unit and integration tests only (the product, test/prom's real Prometheus, the lab's unit tests)
	bash test/check.sh unit prom lab

lint: ## gofmt, go vet, staticcheck, golangci-lint (.golangci.yml), shellcheck (each installed when missing)
	bash test/check.sh lint

fuzz-smoke: ## each fuzz target briefly (a fixed execution count; FUZZTIME=60s to override)
	FUZZTIME=$(FUZZTIME) bash test/check.sh fuzz

bench: ## Go benchmarks of the hot paths
	go test -run '^$$' -bench . -benchmem ./pkg/... ./cmd/...

e2e: ## end-to-end scenarios on a real kubelet + containerd + podman, the hostile tenant, then the DRA cluster ones (root)
	bash test/e2e/run.sh all
	bash test/e2e/run.sh security
	bash test/e2e/run.sh dra
	bash test/e2e/run.sh install

e2e-dra: ## the DRA scenarios on a real single-node cluster (root)
	bash test/e2e/run.sh dra

e2e-security: ## the hostile tenant on the real node: forged, replayed, cross-node seals, privileged pods, slow lpu-nri, connection floods (root)
	bash test/e2e/run.sh security

demo: ## scenario 1 on a simulated LPU node, printed readably (root)
	bash test/e2e/run.sh demo

demo-dra: ## DRA arcs on a real single-node cluster: what each pod sees, a ring picture (root)
	bash test/e2e/run.sh demo-dra

demo-orion: ## the Orion layout (8 Alveo U55C, xilinx backend) end to end (root)
	bash test/e2e/run.sh orion

# The scheduling lab (simulator, cluster harness, prototype scheduler) is
# a module of its own with its own targets: make -C lab help.

clean:
	rm -rf $(BIN) dist
