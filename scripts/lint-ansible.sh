#!/usr/bin/env bash
# The Ansible-side checks of `make test`: ansible-lint with the production profile (zero
# findings), antsibull-changelog lint (every fragment valid), and ansible-test units in its own
# venv (scripts/units.sh). Usage: lint-ansible.sh UNITS_ROOT (.../ansible_collections/qonnect/core)
set -euo pipefail
units_root=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "lint-ansible: ansible-lint --profile production"
ansible-lint --profile production --offline --nocolor -q
echo "lint-ansible: antsibull-changelog lint"
antsibull-changelog lint
echo "lint-ansible: ansible-test units"
bash "$root/scripts/units.sh" "$units_root"
