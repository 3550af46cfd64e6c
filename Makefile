# kube-gateway entry points. `make local-up` and `make test` are all a newcomer needs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c

ROOT := $(CURDIR)
BIN := $(ROOT)/_output/bin
export KUBE_GATEWAY_BIN_DIR := $(BIN)

# Packages of the main module without the end-to-end suite and its harness.
UNIT_PKGS = $$(go list ./... | grep -v -e /test/e2e -e /test/harness)

.PHONY: all build tools test test-unit test-e2e bench verify update-codegen local-up local-down clean

all: build

## build: the kube-gateway binary into _output/bin
build:
	go build -o $(BIN)/kube-gateway ./cmd/kube-gateway

## tools: pinned kube-apiserver, kubectl and etcd into _output/bin (reused when present)
tools:
	hack/build-tools.sh

## test: verification, unit tests, then the end-to-end suite on real apiservers
test: verify test-unit test-e2e

test-unit:
	go test -race -count=1 $(UNIT_PKGS)

test-e2e: build tools
	go test -count=1 -timeout 45m -v ./test/harness/... ./test/e2e/...

## bench: direct vs gateway vs hub+gateway on real apiservers; a report (docs/benchmark.md), not a test
bench: build tools
	go run ./test/bench -out-dir $(ROOT)/_output/bench $(BENCH_ARGS)

## verify: generated code up to date, gofmt, go vet
verify:
	hack/verify-codegen.sh
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/tools/'))"; if [[ -n "$$out" ]]; then echo "gofmt needed: $$out"; exit 1; fi
	go vet ./...

update-codegen:
	hack/update-codegen.sh

## local-up: a hub, two member clusters and the gateway on loopback, left running
local-up: build tools
	go run ./hack/local-up up

## local-down: stops what local-up started
local-down:
	go run ./hack/local-up down

clean:
	rm -rf _output
