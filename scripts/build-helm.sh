#!/usr/bin/env bash
# Build helm (for `{helm: CHART_DIR}` manifest entries, rendered with `helm template`; see
# docs/qos-spec.md) once, from its Go module at the pinned version below, into a cache outside
# the checkout keyed by that version. Debian ships no helm package; the Go module proxy has it,
# and the build is checked against the Go checksum database. Idempotent: when the binary of that
# version is in the cache, nothing is built. Links helm into the venv's bin (.venv/bin/helm).
#
# Environment: QONNECT_HELM_CACHE (default ~/.cache/qonnect/helm), GO (default go),
# QONNECT_HELM_JOBS (go build -p, default 2: the CI machine has 2 shared cores),
# QONNECT_VENV_BIN (default .venv/bin of the checkout; empty to skip the helm link).
# Prints the bin directory on its last line.
set -euo pipefail

# helm v3.19 is built against Kubernetes 1.34, the version of the testbed's real engine (kube/go.mod).
version=v3.19.4

root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
jobs=${QONNECT_HELM_JOBS:-2}
cache=${QONNECT_HELM_CACHE:-$HOME/.cache/qonnect/helm}
venv_bin=${QONNECT_VENV_BIN-$root/.venv/bin}
bin="$cache/$version/bin"

link_helm() {
  if [ -n "$venv_bin" ] && [ -d "$venv_bin" ]; then
    ln -sfn "$bin/helm" "$venv_bin/helm"
  fi
}

if [ -x "$bin/helm" ]; then
  link_helm
  echo "$bin"
  exit 0
fi

if ! command -v "$go" >/dev/null 2>&1; then
  echo "build-helm: Go ($go) is not installed; it is needed to build helm $version" >&2
  exit 1
fi

# One builder at a time per cache (a test session and `make kube` may race).
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin/helm" ]; then
  link_helm
  echo "$bin"
  exit 0
fi

started=$(date +%s)
stage=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

echo "build-helm: building helm $version into $bin (a cold build takes a few minutes)" >&2
(
  # outside any module: `go install pkg@version` resolves helm's own go.mod and go.sum
  cd "$stage"
  GOBIN="$stage" GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0 nice -n 10 "$go" install -p "$jobs" \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    "helm.sh/helm/v3/cmd/helm@$version"
)
"$stage/helm" version --short >/dev/null
echo "$(($(date +%s) - started))" >"$stage/.build-seconds"

rm -rf "$bin"
mkdir -p "$(dirname "$bin")"
mv "$stage" "$bin"
trap - EXIT
echo "build-helm: built in $(cat "$bin/.build-seconds") s" >&2
link_helm
echo "$bin"
