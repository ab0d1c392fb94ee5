#!/usr/bin/env bash
# Install the built tarball into a fresh collections path and render every module and plugin's
# documentation from there, as a user who ran ansible-galaxy collection install would.
set -euo pipefail
dist=$1
tarball=$(ls -t "$dist"/qonnect-core-*.tar.gz | head -n1)
path=$(mktemp -d)
trap 'rm -rf "$path"' EXIT
ansible-galaxy collection install "$tarball" -p "$path" --force >/dev/null
export ANSIBLE_COLLECTIONS_PATH=$path
installed="$path/ansible_collections/qonnect/core"
count=0
for f in "$installed"/plugins/modules/*.py; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .py)
  out=$(ansible-doc "qonnect.core.$name")
  grep -q "qonnect.core.$name" <<<"$out" || { echo "ansible-doc did not render qonnect.core.$name" >&2; exit 1; }
  count=$((count + 1))
done
for f in "$installed"/plugins/inventory/*.py; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .py)
  out=$(ansible-doc -t inventory "qonnect.core.$name")
  grep -q "qonnect.core.$name" <<<"$out" || { echo "ansible-doc did not render inventory qonnect.core.$name" >&2; exit 1; }
  count=$((count + 1))
done
[ -f "$installed/controller/pyproject.toml" ] || { echo "tarball lacks controller/ (roles install it)" >&2; exit 1; }
echo "check-build: $(basename "$tarball") installs; ansible-doc rendered $count plugins"
