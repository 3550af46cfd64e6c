#!/usr/bin/env bash
# Installs the programs the end-to-end suite runs besides the tools that
# hack/build-tools.sh builds: tinyproxy and Dante (forward proxies between the
# gateway and a member, test/harness/forwardproxy.go), HAProxy (the load
# balancer in front of gateway replicas, test/harness/loadbalancer.go) and, for
# the konnectivity test's network namespace as root, iproute2's ip. `make test-e2e` and `.ci/run`
# both run it; it does nothing when all are present.
#
# Installing needs root (or sudo): Debian's packages, without starting the
# packages' own services (the suite starts its own, on free loopback ports).
set -o errexit -o nounset -o pipefail

missing=()
command -v tinyproxy >/dev/null || missing+=(tinyproxy)
command -v danted >/dev/null || [[ -x /usr/sbin/danted ]] || missing+=(dante-server)
command -v haproxy >/dev/null || [[ -x /usr/sbin/haproxy ]] || missing+=(haproxy)
command -v ip >/dev/null || [[ -x /usr/sbin/ip || -x /sbin/ip ]] || missing+=(iproute2)
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

sudo=()
if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
        echo "the end-to-end suite needs ${missing[*]}: install them as root (apt-get install ${missing[*]}) and run again" >&2
        exit 1
    fi
    sudo=(sudo)
fi
if ! command -v apt-get >/dev/null; then
    echo "the end-to-end suite needs ${missing[*]} (Debian package names); install them with your package manager and run again" >&2
    exit 1
fi

echo "installing ${missing[*]} for the end-to-end suite"
# invoke-rc.d asks policy-rc.d whether to start a package's service: 101 = no.
policy=/usr/sbin/policy-rc.d
added_policy=""
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    added_policy=1
fi
cleanup() { if [[ -n "$added_policy" ]]; then "${sudo[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
# Where systemd started them anyway, stop them: the suite starts its own.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    "${sudo[@]}" systemctl disable --now tinyproxy danted haproxy >/dev/null 2>&1 || true
fi
