#!/usr/bin/env bash
# Refuse a tarball holding secrets or local state, then install it into a fresh collections path
# and render every module and plugin's documentation from there, as a user who ran
# ansible-galaxy collection install would.
set -euo pipefail
dist=$1
here=$(cd "$(dirname "$0")" && pwd)
tarball=""
for candidate in "$dist"/qonnect-core-*.tar.gz; do
  [ -e "$candidate" ] || continue
  if [ -z "$tarball" ] || [ "$candidate" -nt "$tarball" ]; then tarball=$candidate; fi
done
[ -n "$tarball" ] || { echo "check-build: no qonnect-core-*.tar.gz in $dist" >&2; exit 1; }
python3 "$here/scan_tarball.py" "$tarball"
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
[ -f "$installed/services/pyproject.toml" ] || { echo "tarball lacks services/ (roles install it)" >&2; exit 1; }
echo "check-build: $(basename "$tarball") holds no secrets, installs; ansible-doc rendered $count plugins"
