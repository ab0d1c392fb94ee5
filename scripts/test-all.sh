#!/usr/bin/env bash
# `make test` after set-up: pytest on its xdist workers in the foreground and, at a lower CPU
# priority beside it, the checks that need no stack (ruff, mypy, molecule, the build and its
# secret scan, ansible-test sanity and units, ansible-lint, changelog lint). The tests mostly wait
# on their stacks, so the checks use the CPU they leave idle instead of adding minutes at the end.
# Each side's output is kept whole (the checks' in build/checks.log, printed after pytest); the
# exit status fails when either side failed.
# Usage: test-all.sh MAKE PYTHON PYTEST_ARGS...
set -uo pipefail
make_cmd=$1
python=$2
shift 2
cd "$(dirname "$0")/.." || exit 2
mkdir -p build
log=build/checks.log
started=$(date +%s)
nice -n 10 "$make_cmd" --no-print-directory checks >"$log" 2>&1 &
checks=$!
"$python" -m pytest tests "$@"
tests_rc=$?
echo "make test: pytest finished in $(($(date +%s) - started)) s (exit $tests_rc); waiting for the checks"
wait "$checks"
checks_rc=$?
cat "$log"
echo "make test: checks exit $checks_rc, $(($(date +%s) - started)) s in all"
# The checks' log buries pytest's own summary: name the failed tests again at the very end, where a
# CI page that shows only the tail still shows them.
if [ "$tests_rc" -ne 0 ]; then
  "$python" scripts/failed-tests.py build/pytest.xml
fi
[ "$tests_rc" -eq 0 ] && [ "$checks_rc" -eq 0 ]
