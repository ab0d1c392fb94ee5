#!/usr/bin/env bash
# Build the real Kubernetes control plane of the testbed (`qonnect testbed up --engine kube`)
# once, from the Go module pinned in kube/ (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and etcd), into a cache outside the checkout keyed by the Kubernetes
# version. (The kubelet is simulated in Python: testbed/qonnect_testbed/kube/kubelet.py.) Idempotent: when every binary of that
# version is in the cache, nothing is built. Links kubectl into the venv's bin (.venv/bin/kubectl).
#
# Environment: QONNECT_KUBE_CACHE (default ~/.cache/qonnect/kube), GO (default go),
# QONNECT_KUBE_JOBS (go build -p, default 2: the CI machine has 2 shared cores),
# QONNECT_VENV_BIN (default .venv/bin of the checkout; empty to skip the kubectl link).
# Prints the bin directory on its last line.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
jobs=${QONNECT_KUBE_JOBS:-2}
cache=${QONNECT_KUBE_CACHE:-$HOME/.cache/qonnect/kube}
venv_bin=${QONNECT_VENV_BIN-$root/.venv/bin}

# The pinned versions, read from go.mod without Go (a warm cache needs no Go installed).
pinned() {
  sed -n -E "s@^(require)?[[:space:]]+$2 (v[^ ]+).*@\\2@p" "$1" | head -n1
}
version=$(pinned "$root/kube/go.mod" k8s.io/kubernetes)
if [ -z "$version" ]; then
  echo "build-kube: cannot read the pinned k8s.io/kubernetes version from kube/go.mod" >&2
  exit 1
fi
bin="$cache/$version/bin"
binaries="kube-apiserver kube-controller-manager kube-scheduler kubectl etcd"

complete() {
  local b
  for b in $binaries; do
    [ -x "$bin/$b" ] || return 1
  done
}

link_kubectl() {
  if [ -n "$venv_bin" ] && [ -d "$venv_bin" ]; then
    ln -sfn "$bin/kubectl" "$venv_bin/kubectl"
  fi
}

if complete; then
  link_kubectl
  echo "$bin"
  exit 0
fi

if ! command -v "$go" >/dev/null 2>&1; then
  echo "build-kube: Go ($go) is not installed; it is needed to build Kubernetes $version" >&2
  exit 1
fi

# One builder at a time per cache (a test session and `make kube` may race).
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if complete; then
  link_kubectl
  echo "$bin"
  exit 0
fi

started=$(date +%s)
stage=$(mktemp -d "$cache/.build.XXXXXX")
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT

major=${version#v}
major=${major%%.*}
minor=${version#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

export GOFLAGS="-trimpath -mod=readonly"
export CGO_ENABLED=0

echo "build-kube: building Kubernetes $version and etcd into $bin (a cold build takes minutes)" >&2
(
  cd "$root/kube"
  nice -n 10 "$go" build -p "$jobs" -ldflags "$ldflags" -o "$stage/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  nice -n 10 "$go" build -p "$jobs" -ldflags "-s -w" -o "$stage/etcd" go.etcd.io/etcd/server/v3
)
echo "$(($(date +%s) - started))" >"$stage/.build-seconds"

rm -rf "$bin"
mkdir -p "$(dirname "$bin")"
mv "$stage" "$bin"
trap - EXIT
echo "build-kube: built in $(cat "$bin/.build-seconds") s" >&2
link_kubectl
echo "$bin"
