#!/usr/bin/env bash
# Create the project venv with everything the collection, the qonnect package and the tests
# need, and link the checkout as the qonnect.core collection inside it.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}
root=$(cd "$(dirname "$0")/.." && pwd)

if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "setup: $python has no venv/ensurepip; installing python3-venv" >&2
  if command -v apt-get >/dev/null; then
    sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq python3-venv
  else
    echo "setup: please install the venv module for $python" >&2; exit 1
  fi
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/test-requirements.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root/services[all]" -e "$root/testbed"

# A wheelhouse of the services' dependencies at the venv's versions (and the build backend), so
# tests/integration/user_path/test_plain_install.py installs into a new venv offline and quickly.
wheels=${QONNECT_WHEELHOUSE:-$HOME/.cache/qonnect/wheels}
mkdir -p "$wheels"
pins=$(mktemp)
"$venv/bin/python" -m pip freeze --exclude-editable >"$pins"
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check -w "$wheels" --find-links "$wheels" \
  -c "$pins" "$root/services[all]" "setuptools>=77" wheel
rm -f "$pins" "$wheels"/qonnect-*.whl  # the project's own wheel is built from the tarball by the test

# The checkout doubles as the installed collection: ansible finds it through
# ANSIBLE_COLLECTIONS_PATH, plain Python in site-packages/ansible_collections/qonnect/core, where
# a built qonnect wheel installs its copy of the collection (services/setup.py); the editable
# install links the checkout there instead.
mkdir -p "$venv/collections/ansible_collections/qonnect"
ln -sfn "$root" "$venv/collections/ansible_collections/qonnect/core"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -f "$site/qonnect-collections.pth"  # older set-ups put the collection on sys.path this way
mkdir -p "$site/ansible_collections/qonnect"
ln -sfn "$root" "$site/ansible_collections/qonnect/core"

# ansible-test bootstraps pip from a host that is unreachable here; seed its cache with a
# stand-in that uses ensurepip + the package index instead.
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
for name in get_pip_24_2.py get_pip_25_2.py get_pip_25_0_1.py get_pip_24_0.py; do
  [ -s "$cache/$name" ] || cat > "$cache/$name" <<'PYEOF'
import subprocess, sys
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--default-pip'])
args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'pip', 'install'] + args)
PYEOF
done

# --- headless Chromium for the /ui status page test (tests/integration/ui) -----------------
# Debian's chromium + chromium-driver; installed only where apt-get exists and we are root.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing chromium and chromium-driver for the status page test" >&2
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: chromium/chromedriver missing; tests/integration/ui/test_status_page.py needs them" >&2
  fi
fi
# --- end of headless Chromium ----------------------------------------------------------------

# --- shellcheck for ansible-test sanity (its shellcheck test is skipped, not failed, without it) --
if ! command -v shellcheck >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "setup: installing shellcheck for ansible-test sanity" >&2
    apt-get update -qq && apt-get install -y -qq shellcheck >/dev/null
  else
    echo "setup: shellcheck missing; make sanity needs it (apt-get install shellcheck as root)" >&2
  fi
fi

echo "setup: $venv ready"
