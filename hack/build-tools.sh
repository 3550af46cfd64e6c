#!/usr/bin/env bash
# Builds the pinned kube-apiserver, kube-controller-manager, kubectl and etcd of
# hack/tools/go.mod, and helm of hack/tools/helm/go.mod, into _output/bin through the
# Go module proxy, and the konnectivity proxy-server and proxy-agent of
# hack/tools/konnectivity/go.mod. Each group is reused while its pins (and this script) are unchanged.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/_output/bin"
STAMP="${BIN}/.tools-$(cat "${BASH_SOURCE[0]}" "${ROOT}/hack/tools/go.mod" "${ROOT}/hack/tools/go.sum" "${ROOT}/hack/tools/etcd/main.go" | sha256sum | cut -c1-16)"
HELM_STAMP="${BIN}/.helm-$(cat "${BASH_SOURCE[0]}" "${ROOT}/hack/tools/helm/go.mod" "${ROOT}/hack/tools/helm/go.sum" | sha256sum | cut -c1-16)"
KONN_STAMP="${BIN}/.konnectivity-$(cat "${BASH_SOURCE[0]}" "${ROOT}/hack/tools/konnectivity/go.mod" "${ROOT}/hack/tools/konnectivity/go.sum" | sha256sum | cut -c1-16)"
mkdir -p "${BIN}"

if [[ ! -f "${STAMP}" || ! -x "${BIN}/kube-apiserver" || ! -x "${BIN}/kube-controller-manager" || ! -x "${BIN}/kubectl" || ! -x "${BIN}/etcd" ]]; then
    rm -f "${BIN}"/.tools-*
    echo "building kube-apiserver, kube-controller-manager, kubectl and etcd (pinned in hack/tools/go.mod; several minutes on a cold cache)"
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
    go build -ldflags "${LDFLAGS}" -o "${BIN}/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kubectl ./etcd
    touch "${STAMP}"
    echo "tools built in $(( $(date +%s) - start ))s"
fi

if [[ ! -f "${HELM_STAMP}" || ! -x "${BIN}/helm" ]]; then
    rm -f "${BIN}"/.helm-*
    echo "building helm (pinned in hack/tools/helm/go.mod; a few minutes on a cold cache)"
    cd "${ROOT}/hack/tools/helm"
    start=$(date +%s)
    # Stamp the version as helm's own release build does (`helm version`).
    HELM_VERSION="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
    go build -ldflags "-X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        -o "${BIN}/" helm.sh/helm/v4/cmd/helm
    touch "${HELM_STAMP}"
    echo "helm built in $(( $(date +%s) - start ))s"
fi

if [[ ! -f "${KONN_STAMP}" || ! -x "${BIN}/proxy-server" || ! -x "${BIN}/proxy-agent" ]]; then
    rm -f "${BIN}"/.konnectivity-*
    echo "building konnectivity proxy-server and proxy-agent (pinned in hack/tools/konnectivity/go.mod; about a minute on a cold cache)"
    cd "${ROOT}/hack/tools/konnectivity"
    start=$(date +%s)
    # The upstream module replaces its konnectivity-client with its in-tree copy, so
    # `go install pkg@version` refuses it; this module pins the same client release.
    go build -o "${BIN}/proxy-server" sigs.k8s.io/apiserver-network-proxy/cmd/server
    go build -o "${BIN}/proxy-agent" sigs.k8s.io/apiserver-network-proxy/cmd/agent
    touch "${KONN_STAMP}"
    echo "konnectivity built in $(( $(date +%s) - start ))s"
fi
