#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kubectl and etcd of hack/tools/go.mod into
# _output/bin through the Go module proxy. Reuses them while the pins are unchanged.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/_output/bin"
STAMP="${BIN}/.tools-$(cat "${BASH_SOURCE[0]}" "${ROOT}/hack/tools/go.mod" "${ROOT}/hack/tools/go.sum" "${ROOT}/hack/tools/etcd/main.go" | sha256sum | cut -c1-16)"

if [[ -f "${STAMP}" && -x "${BIN}/kube-apiserver" && -x "${BIN}/kubectl" && -x "${BIN}/etcd" ]]; then
    exit 0
fi
mkdir -p "${BIN}"
rm -f "${BIN}"/.tools-*
echo "building kube-apiserver, kubectl and etcd (pinned in hack/tools/go.mod; several minutes on a cold cache)"
cd "${ROOT}/hack/tools"
start=$(date +%s)
# Stamp the Kubernetes version as the release build does, so that /version and
# `kubectl version` report v1.37.x rather than a placeholder.
KUBE_VERSION="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
IFS=. read -r KUBE_MAJOR KUBE_MINOR _ <<<"${KUBE_VERSION#v}"
LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=${KUBE_MAJOR} -X ${pkg}.gitMinor=${KUBE_MINOR} -X ${pkg}.gitTreeState=clean"
done
go build -ldflags "${LDFLAGS}" -o "${BIN}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ./etcd
touch "${STAMP}"
echo "tools built in $(( $(date +%s) - start ))s"
