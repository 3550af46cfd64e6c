#!/usr/bin/env bash
# Fails when the generated code (apis/, registry/upstreamcluster/openapi) differs
# from what hack/update-codegen.sh would write now.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT
# Copy the sources only (not _output/ nor .git) and regenerate there.
tar -C "${ROOT}" --exclude=./_output --exclude=./.git -cf - . | tar -C "${TMP}" -xf -
"${TMP}/hack/update-codegen.sh" >/dev/null
# Everything hack/update-codegen.sh writes: apis/ (types helpers, clients), the
# server's OpenAPI definitions, and the API rule report.
status=0
for dir in apis registry/upstreamcluster/openapi hack/api-rules; do
    diff -ru "${ROOT}/${dir}" "${TMP}/${dir}" || status=1
done
if [[ "${status}" != 0 ]]; then
    echo "generated code is out of date: run hack/update-codegen.sh" >&2
    exit 1
fi
echo "generated code is up to date"
