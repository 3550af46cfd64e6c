#!/usr/bin/env bash
# Fails when the generated code of apis/ differs from what hack/update-codegen.sh
# would write now.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT
# Copy the sources only (not _output/ nor .git) and regenerate there.
tar -C "${ROOT}" --exclude=./_output --exclude=./.git -cf - . | tar -C "${TMP}" -xf -
"${TMP}/hack/update-codegen.sh" >/dev/null
if ! diff -ru "${ROOT}/apis" "${TMP}/apis" || ! diff -ru "${ROOT}/hack/api-rules" "${TMP}/hack/api-rules"; then
    echo "generated code is out of date: run hack/update-codegen.sh" >&2
    exit 1
fi
echo "generated code is up to date"
