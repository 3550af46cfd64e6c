#!/usr/bin/env bash
# Regenerates deepcopy and defaulting functions, OpenAPI definitions and the Go
# clients of apis/ with k8s.io/code-generator's kube_codegen.sh, at the version
# pinned in go.mod.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# On a cold module cache `go list -m` knows the module but not its folder yet.
go mod download k8s.io/code-generator
CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
# kube_codegen.sh installs its generators with `go install`; keep them in the
# ignored output folder rather than in the user's GOBIN.
export GOBIN="${ROOT}/_output/codegen-bin"
mkdir -p "${GOBIN}"
source "${CODEGEN_PKG}/kube_codegen.sh"

MODULE="github.com/kubewharf/kube-gateway"

# Deepcopy (+k8s:deepcopy-gen) and defaulting (+k8s:defaulter-gen: the
# SetObjectDefaults_* functions over the hand-written SetDefaults_* ones, and
# RegisterDefaults, which the package's SchemeBuilder calls).
kube::codegen::gen_helpers \
    --boilerplate "${ROOT}/hack/boilerplate.go.txt" \
    "${ROOT}/apis"

# The OpenAPI definitions serve the server only (the OpenAPI v2 and v3 it
# publishes, and hack/openapi-schema below): they are generated into
# registry/upstreamcluster/openapi, not into the types package that clients
# import. The model names stay those of the types package
# (zz_generated.model_name.go there, without imports).
OPENAPI_PKG_DIR="registry/upstreamcluster/openapi"
rm -f "${ROOT}/${OPENAPI_PKG_DIR}/zz_generated.openapi.go"
kube::codegen::gen_openapi \
    --output-dir "${ROOT}/${OPENAPI_PKG_DIR}" \
    --output-pkg "${MODULE}/${OPENAPI_PKG_DIR}" \
    --report-filename "${ROOT}/hack/api-rules/violation_exceptions.list" \
    --update-report \
    --output-model-name-file zz_generated.model_name.go \
    --boilerplate "${ROOT}/hack/boilerplate.go.txt" \
    "${ROOT}/apis"

# OpenAPI v2 definitions of the API types, built from the definitions just
# generated (no server): with them applyconfiguration-gen also writes the
# Extract<Kind> functions and the schema of apis/client/applyconfiguration/internal.
# Only an input of the generator, so it stays in the ignored output folder.
OPENAPI_SCHEMA="${ROOT}/_output/codegen/openapi-schema.json"
mkdir -p "$(dirname "${OPENAPI_SCHEMA}")"
go run ./hack/openapi-schema -o "${OPENAPI_SCHEMA}"

# Typed clientset, listers, informers and apply configurations (typed
# server-side apply) under apis/client. The proxy subresource is a connecter and
# has no generated method: use multicluster.ConfigFor or the routing round
# tripper of apis/client/multicluster instead.
kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema "${OPENAPI_SCHEMA}" \
    --output-dir "${ROOT}/apis/client" \
    --output-pkg "${MODULE}/apis/client" \
    --boilerplate "${ROOT}/hack/boilerplate.go.txt" \
    "${ROOT}/apis"
