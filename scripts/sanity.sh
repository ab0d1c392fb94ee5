#!/usr/bin/env bash
# ansible-test sanity (every test, shellcheck included, no ignore entries) on a copy of the
# collection at an ansible_collections/ path.
set -euo pipefail
dest=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v shellcheck >/dev/null || { echo "sanity: shellcheck missing (make setup installs it)" >&2; exit 1; }
bash "$here/collection-copy.sh" "$dest"
cd "$dest"
exec ansible-test sanity --venv --python 3.11 --color no
