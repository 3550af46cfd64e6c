# kube-gateway entry points. `make local-up` and `make test` are all a newcomer needs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c

ROOT := $(CURDIR)
BIN := $(ROOT)/_output/bin
export KUBE_GATEWAY_BIN_DIR := $(BIN)

# Packages of the main module without the end-to-end suite, its harness and the
# chart checks (which need helm from `make tools`).
UNIT_PKGS = $$(go list ./... | grep -v -e /test/e2e -e /test/harness -e /test/chart)

.PHONY: all build tools test-deps test test-unit test-chart test-e2e bench bench-scale bench-exec soak fuzz verify update-codegen local-up local-down clean image image-names

# Images of `make image`; the tag is the chart's appVersion, so that the chart's
# default image.repository/tag (and etcd.bundled.image) name exactly these.
DOCKER ?= docker
IMAGE_REPO ?= kubewharf/kube-gateway
ETCD_IMAGE_REPO ?= kubewharf/kube-gateway-etcd
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(ROOT)/charts/kube-gateway/Chart.yaml)

all: build

## build: the kube-gateway binary into _output/bin
build:
	go build -o $(BIN)/kube-gateway ./cmd/kube-gateway

## tools: pinned kube-apiserver, kube-controller-manager, kubectl, etcd, helm and the konnectivity proxy-server and proxy-agent into _output/bin (reused when present)
tools:
	hack/build-tools.sh

## test-deps: tinyproxy, Dante, HAProxy and ip for the end-to-end suite, from Debian's packages when missing (needs root or sudo to install)
test-deps:
	hack/test-deps.sh

## test: verification, unit tests, the chart checks, then the end-to-end suite on real apiservers
test: verify test-unit test-chart test-e2e

test-unit:
	go test -race -count=1 $(UNIT_PKGS)
	# allocation guards (alloc_test.go files): meaningless under the race detector
	go test -count=1 -run Allocates ./proxy/forward/ ./proxy/chain/ ./proxy/fleetcache/

## test-chart: helm lint and template of charts/ (test/chart); needs only helm
test-chart: tools
	go test -count=1 -v ./test/chart/...

test-e2e: build tools test-deps
	go test -count=1 -timeout 45m -v ./test/harness/... ./test/e2e/...

## bench: direct vs gateway vs hub+gateway on real apiservers; a report (docs/benchmark.md), not a test
bench: build tools
	go run ./test/bench -out-dir $(ROOT)/_output/bench $(BENCH_ARGS)

## bench-scale: the gateway's cost per open watch and per UpstreamCluster on real apiservers; a report, not a test
bench-scale: build tools
	go run ./test/bench/scale -out-dir $(ROOT)/_output/bench-scale $(BENCH_SCALE_ARGS)

## bench-exec: kubectl exec sessions over SPDY and WebSocket, direct and through the gateway, counting lost output and wrong exit codes; a report, not a test
bench-exec: build tools
	go run ./test/bench/exec -out-dir $(ROOT)/_output/bench-exec $(BENCH_EXEC_ARGS)

## soak: 30 minutes of mixed traffic through hub + gateway with edits and credential rotations; RSS, goroutines, files, p99 over time (SOAK_ARGS="-duration 3m" for the short form); a report, not a test
soak: build tools
	go run ./test/bench/soak -out-dir $(ROOT)/_output/soak $(SOAK_ARGS)

## fuzz: every fuzz target for FUZZTIME each (default 100000x); a long run, not part of `make test`
fuzz:
	hack/fuzz.sh

## verify: generated code up to date, apis/ free of server dependencies, gofmt, go vet
verify:
	hack/verify-codegen.sh
	hack/verify-client-deps.sh
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/'))"; if [[ -n "$$out" ]]; then echo "gofmt needed: $$out"; exit 1; fi
	go vet ./...

update-codegen:
	hack/update-codegen.sh

## image: the kube-gateway and etcd images (cmd/kube-gateway/Dockerfile); needs a Docker engine, not part of `make test`
image:
	$(DOCKER) build -f cmd/kube-gateway/Dockerfile --target gateway -t $(IMAGE_REPO):$(IMAGE_TAG) .
	$(DOCKER) build -f cmd/kube-gateway/Dockerfile --target etcd -t $(ETCD_IMAGE_REPO):$(IMAGE_TAG) .

## image-names: the references `make image` tags, one a line
image-names:
	@echo $(IMAGE_REPO):$(IMAGE_TAG)
	@echo $(ETCD_IMAGE_REPO):$(IMAGE_TAG)

## local-up: a hub, two member clusters and the gateway on loopback, left running
local-up: build tools
	go run ./hack/local-up up

## local-down: stops what local-up started
local-down:
	go run ./hack/local-up down

clean:
	rm -rf _output
