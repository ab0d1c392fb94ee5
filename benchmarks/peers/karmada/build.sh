#!/usr/bin/env bash
# Build Karmada's karmada-controller-manager, karmada-scheduler and karmada-webhook once, from the Go module
# pinned in this directory's go.mod (github.com/karmada-io/karmada at one exact version, fetched
# through the Go module proxy), into a cache outside the checkout keyed by that version, for the
# side-by-side benchmark benchmarks/peers/karmada/run.py. Idempotent: when every binary of that
# version are in the cache, nothing is built. The webhook is built because Karmada's defaulting
# lives there (permanent ids on policies, bindings and works, which the controllers use to find
# a binding's works; spread defaults; finalizers). Karmada's CRDs are not copied: run.py reads them
# from the module cache (`go env GOMODCACHE`), the same module version.
#
# Environment: QONNECT_KARMADA_CACHE (default ~/.cache/qonnect/karmada), GO (default go),
# QONNECT_KARMADA_JOBS (go build -p, default 1: the machine's 2 cores are shared).
# If the pinned Karmada needs a newer Go than the installed one: export GOTOOLCHAIN=go1.27.3.
# Prints the bin directory on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
go=${GO:-go}
jobs=${QONNECT_KARMADA_JOBS:-1}
cache=${QONNECT_KARMADA_CACHE:-$HOME/.cache/qonnect/karmada}

version=$(sed -n -E 's@^(require)?[[:space:]]*github.com/karmada-io/karmada (v[^ ]+).*@\2@p' "$here/go.mod" | head -n1)
if [ -z "$version" ]; then
  echo "build-karmada: cannot read the pinned github.com/karmada-io/karmada version from $here/go.mod" >&2
  exit 1
fi
bin="$cache/$version/bin"
binaries="karmada-controller-manager karmada-scheduler karmada-webhook"

complete() {
  local b
  for b in $binaries; do
    [ -x "$bin/$b" ] || return 1
  done
}

if complete; then
  echo "$bin"
  exit 0
fi

if ! command -v "$go" >/dev/null 2>&1; then
  echo "build-karmada: Go ($go) is not installed; it is needed to build Karmada $version" >&2
  exit 1
fi

# One builder at a time per cache.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if complete; then
  echo "$bin"
  exit 0
fi

started=$(date +%s)
stage=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

ldflags="-s -w -X github.com/karmada-io/karmada/pkg/version.gitVersion=$version"
ldflags="$ldflags -X github.com/karmada-io/karmada/pkg/version.gitTreeState=clean"
export GOFLAGS="-trimpath -mod=readonly"
export CGO_ENABLED=0

echo "build-karmada: building Karmada $version into $bin (a cold build takes many minutes)" >&2
(
  cd "$here"
  nice -n 19 "$go" build -p "$jobs" -ldflags "$ldflags" -o "$stage/karmada-controller-manager" \
    github.com/karmada-io/karmada/cmd/controller-manager
  nice -n 19 "$go" build -p "$jobs" -ldflags "$ldflags" -o "$stage/karmada-scheduler" \
    github.com/karmada-io/karmada/cmd/scheduler
  nice -n 19 "$go" build -p "$jobs" -ldflags "$ldflags" -o "$stage/karmada-webhook" \
    github.com/karmada-io/karmada/cmd/webhook
)
echo "$(($(date +%s) - started))" >"$stage/.build-seconds"

rm -rf "$bin"
mkdir -p "$(dirname "$bin")"
mv "$stage" "$bin"
trap - EXIT
echo "build-karmada: built in $(cat "$bin/.build-seconds") s" >&2
echo "$bin"
