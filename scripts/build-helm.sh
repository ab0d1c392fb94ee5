#!/usr/bin/env bash
# Build helm (for `{helm: CHART_DIR}` manifest entries, rendered with `helm template`; see
# docs/qos-spec.md) once, from its Go module at the pinned version below, into a cache outside
# the checkout keyed by that version and a build number (bump `build` whenever the way helm is
# built changes, so a machine holding an older binary builds the new one). Debian ships no helm package; the Go module proxy has it,
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
# 2: helm's Kubernetes defaults (`helm version`, `helm template` without --kube-version, lint's
# deprecation checks) are set to its own client-go's release, as helm's Makefile does; build 1
# left them at helm's source default, v1.20.0, which refused charts with `kubeVersion: >=1.23`.
build=2

root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
jobs=${QONNECT_HELM_JOBS:-2}
cache=${QONNECT_HELM_CACHE:-$HOME/.cache/qonnect/helm}
venv_bin=${QONNECT_VENV_BIN-$root/.venv/bin}
bin="$cache/$version-b$build/bin"

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

# helm's Makefile: -X .../chartutil.k8sVersionMajor/Minor and .../lint/rules.k8sVersionMajor/Minor
# from the client-go helm's go.mod requires (client-go v0.MINOR.x is Kubernetes 1.MINOR).
k8s_version() {
  local gomod client_go
  gomod=$(cd / && GOFLAGS=-mod=mod "$go" mod download -json "helm.sh/helm/v3@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
    echo "build-helm: cannot read helm $version's go.mod from the Go module proxy" >&2
    return 1
  fi
  client_go=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")
  if [[ ! $client_go =~ ^v0\.([0-9]+)\. ]]; then
    echo "build-helm: $gomod requires no k8s.io/client-go v0.MINOR.x (found '$client_go')" >&2
    return 1
  fi
  echo "1 ${BASH_REMATCH[1]}"
}
read -r k8s_major k8s_minor < <(k8s_version) || exit 1
if [ -z "${k8s_minor:-}" ]; then
  exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=$k8s_major -X $pkg.k8sVersionMinor=$k8s_minor"
done

started=$(date +%s)
stage=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

echo "build-helm: building helm $version (Kubernetes default v$k8s_major.$k8s_minor.0) into $bin" \
  "(a cold build takes a few minutes)" >&2
(
  # outside any module: `go install pkg@version` resolves helm's own go.mod and go.sum
  cd "$stage"
  GOBIN="$stage" GOFLAGS="-trimpath -mod=mod" CGO_ENABLED=0 nice -n 10 "$go" install -p "$jobs" \
    -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$version"
)
"$stage/helm" version --short >/dev/null
# the link flags took: a chart rendered without --kube-version sees helm's client-go's release
probe="$stage/.probe"
mkdir -p "$probe/templates"
printf 'apiVersion: v2\nname: probe\nversion: 0.1.0\n' >"$probe/Chart.yaml"
printf '# {{ .Capabilities.KubeVersion.Version }}\n' >"$probe/templates/v.yaml"
default=$("$stage/helm" template probe "$probe" | sed -n 's/^# \(v[0-9.]*\)$/\1/p')
rm -rf "$probe"
if [ "$default" != "v$k8s_major.$k8s_minor.0" ]; then
  echo "build-helm: the built helm defaults to Kubernetes '$default', expected v$k8s_major.$k8s_minor.0" >&2
  exit 1
fi
echo "$(($(date +%s) - started))" >"$stage/.build-seconds"

rm -rf "$bin"
mkdir -p "$(dirname "$bin")"
mv "$stage" "$bin"
trap - EXIT
echo "build-helm: built in $(cat "$bin/.build-seconds") s" >&2
link_helm
echo "$bin"
