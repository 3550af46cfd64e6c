#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kubectl and etcd of hack/tools/go.mod into
# _output/bin through the Go module proxy. Reuses them while the pins are unchanged.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/_output/bin"
STAMP="${BIN}/.tools-$(cat "${ROOT}/hack/tools/go.mod" "${ROOT}/hack/tools/go.sum" "${ROOT}/hack/tools/etcd/main.go" | sha256sum | cut -c1-16)"

if [[ -f "${STAMP}" && -x "${BIN}/kube-apiserver" && -x "${BIN}/kubectl" && -x "${BIN}/etcd" ]]; then
    exit 0
fi
mkdir -p "${BIN}"
rm -f "${BIN}"/.tools-*
echo "building kube-apiserver, kubectl and etcd (pinned in hack/tools/go.mod; several minutes on a cold cache)"
cd "${ROOT}/hack/tools"
start=$(date +%s)
go build -o "${BIN}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ./etcd
touch "${STAMP}"
echo "tools built in $(( $(date +%s) - start ))s"
