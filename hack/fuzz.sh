#!/usr/bin/env bash
# Runs every fuzz target of the module (func FuzzXxx in a _test.go file) for
# FUZZTIME each: an iteration count such as 100000x, or a duration such as 60s.
# Counts are the default because a time-bounded run of Go's fuzzer can end in a
# spurious "context deadline exceeded" on a loaded machine. A failing input is
# written under the package's testdata/fuzz/ and the script fails.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
FUZZTIME="${FUZZTIME:-100000x}"

failed=()
while IFS=: read -r file name; do
    pkg="./$(dirname "${file}")"
    echo "== ${pkg} ${name} (${FUZZTIME})"
    if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME}" "${pkg}"; then
        failed+=("${pkg} ${name}")
    fi
done < <(git grep -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed 's/:func /:/')

if (( ${#failed[@]} > 0 )); then
    printf 'fuzz target failed: %s\n' "${failed[@]}"
    exit 1
fi
echo "every fuzz target passed ${FUZZTIME}"
