#!/usr/bin/env bash
# ansible-test units in its own venv (requirements from tests/unit/requirements.txt) on a copy
# of the collection at an ansible_collections/ path.
set -euo pipefail
dest=$1
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/collection-copy.sh" "$dest"
cd "$dest"
exec ansible-test units --venv --python 3.11 --color no --requirements
