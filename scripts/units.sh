#!/usr/bin/env bash
# ansible-test units in its own venv (requirements from tests/unit/requirements.txt) on the
# collection as users get it: built with `ansible-galaxy collection build` (galaxy.yml
# build_ignore applies) and installed into DEST's ansible_collections/ path. A shipped unit test
# that needs a file the tarball leaves out (the testbed, benchmarks, build scripts) fails here.
set -euo pipefail
dest=$1
root=$(cd "$(dirname "$0")/.." && pwd)
case "$dest" in
  */ansible_collections/qonnect/core) ;;
  *) echo "units: $dest must end in ansible_collections/qonnect/core" >&2; exit 2 ;;
esac
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
ansible-galaxy collection build --force --output-path "$dist" "$root" >/dev/null
rm -rf "$dest"
ansible-galaxy collection install --force -p "${dest%/ansible_collections/qonnect/core}" "$dist"/qonnect-core-*.tar.gz >/dev/null
# ansible-test lists content through git
cd "$dest"
git init -q . && git add -A >/dev/null 2>&1 && git -c user.name=ci -c user.email=ci@localhost commit -qm installed >/dev/null
exec ansible-test units --venv --python 3.11 --color no --requirements
