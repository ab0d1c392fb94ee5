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
# What users need is in it; development-only content (and tests that need the testbed it leaves
# out) is not (galaxy.yml build_ignore).
listing=$(tar -tzf "$tarball")
for want in MANIFEST.json FILES.json README.md CHANGELOG.rst COPYING meta/runtime.yml \
  plugins/modules/deploy.py plugins/inventory/kb.py plugins/filter/pip_requirement.py \
  plugins/module_utils/kb_client.py plugins/doc_fragments/kb.py \
  roles/controller/tasks/main.yml roles/knowledge_base/tasks/main.yml roles/resource_agent/tasks/main.yml \
  roles/qonnect_package/tasks/main.yml roles/supervised_service/tasks/main.yml \
  playbooks/site.yml playbooks/migrate.yml docs/architecture.md docs/awx/ examples/bookinfo/ \
  services/pyproject.toml services/setup.py services/qonnect/cli.py services/qonnect/kb/ \
  tests/config.yml tests/unit/plugins/ tests/support/__init__.py; do
  grep -qxF -e "$want" -e "${want%/}/" <<<"$listing" || grep -q "^$want" <<<"$listing" ||
    { echo "check-build: $(basename "$tarball") lacks $want" >&2; exit 1; }
done
for unwanted in benchmarks/ scripts/ kube/ testbed/ Makefile ruff.toml mypy.ini pytest.ini .ansible-lint \
  .pre-commit-config.yaml .ci/ test-requirements.txt extensions/molecule/ tests/integration/ \
  tests/conformance/ tests/unit/testbed/ tests/unit/benchmarks/ tests/apps/ services/build/; do
  if grep -q "^$unwanted" <<<"$listing"; then
    echo "check-build: $(basename "$tarball") holds $unwanted (development only; galaxy.yml build_ignore)" >&2
    exit 1
  fi
done
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
for f in "$installed"/plugins/filter/*.py; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .py)
  out=$(ansible-doc -t filter "qonnect.core.$name")
  grep -q "qonnect.core.$name" <<<"$out" || { echo "ansible-doc did not render filter qonnect.core.$name" >&2; exit 1; }
  count=$((count + 1))
done
[ -f "$installed/services/pyproject.toml" ] || { echo "tarball lacks services/ (roles install it)" >&2; exit 1; }
echo "check-build: $(basename "$tarball") holds no secrets, installs; ansible-doc rendered $count plugins"
