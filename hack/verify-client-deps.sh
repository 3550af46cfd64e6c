#!/usr/bin/env bash
# Fails when a package under apis/ depends on the server side. apis/ is what
# client programs import (the types, the generated clientset, informers,
# listers and apply configurations, the multicluster helpers): they must get
# client-go's dependency graph, not k8s.io/apiserver's (docs/development.md).
# Server-side code for the API lives in registry/upstreamcluster.
# Test files are not checked: they are not compiled into client programs.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

FORBIDDEN='^(k8s\.io/apiserver|sigs\.k8s\.io/apiserver-runtime|go\.etcd\.io|go\.opentelemetry\.io|github\.com/prometheus)(/|$)'

status=0
while read -r pkg deps; do
    bad="$(tr ' ' '\n' <<<"${deps}" | grep -E "${FORBIDDEN}" || true)"
    if [[ -z "${bad}" ]]; then
        continue
    fi
    status=1
    echo "${pkg} depends on $(wc -l <<<"${bad}" | tr -d ' ') server-side packages:" >&2
    # The shortest import chain from pkg into the server side: where to cut.
    go list -deps -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "${pkg}" |
        awk -v root="${pkg}" -v forbidden="${FORBIDDEN}" '
            { imports[$1] = $0 }
            END {
                queue[0] = root; seen[root] = 1; tail = 1
                for (head = 0; head < tail; head++) {
                    p = queue[head]
                    n = split(imports[p], f, " ")
                    for (i = 2; i <= n; i++) {
                        q = f[i]
                        if (q in seen) continue
                        seen[q] = 1; parent[q] = p; queue[tail++] = q
                        if (q ~ forbidden) {
                            chain = q
                            for (r = q; r != root; r = parent[r]) chain = parent[r] " -> " chain
                            print "    " chain
                            exit
                        }
                    }
                }
            }' >&2
done < <(go list -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./apis/...)

if [[ "${status}" != 0 ]]; then
    echo "apis/ must not import the server: move server-side code to registry/upstreamcluster" >&2
    exit 1
fi
echo "apis/ is free of server dependencies ($(go list -deps ./apis/client/clientset/versioned | wc -l | tr -d ' ') packages in the clientset's graph)"
