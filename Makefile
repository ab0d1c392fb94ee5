# qonnect.core — set-up, tests, demo. Every target sets up what it needs on a fresh Debian
# machine with only Python 3 and the package registries.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.setup-stamp
COLLECTIONS := $(CURDIR)/$(VENV)/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/qonnect/core
SANITY_ROOT := $(CURDIR)/build/sanity/ansible_collections/qonnect/core
UNITS_ROOT := $(CURDIR)/build/units/ansible_collections/qonnect/core
COLLECTION_VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
DIST := $(CURDIR)/build/dist
# demo state (tokens, keys, kubeconfigs, the KB database) stays outside the checkout: never in a build
DEMO_DIR ?= $(or $(XDG_STATE_HOME),$(HOME)/.local/state)/qonnect/demo
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
# The KB tests' PostgreSQL (scripts/setup-services.sh creates this role and database).
export QONNECT_TEST_PG ?= postgresql://qonnect:qonnect@127.0.0.1:5432/test
export PATH := $(BIN):$(PATH)
# pytest-xdist workers for `make test` and `make check`: the tests mostly wait on stacks, so more
# workers than cores; groups keep a stack's tests on one worker (tests/support/scheduling.py)
PYTEST_WORKERS ?= 4
PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

.PHONY: setup services test checks check unit integration molecule sanity lint typecheck build check-build ansible-lint ee changelog demo demo-kube demo-down plan clean kube

setup: $(STAMP)

$(STAMP): requirements.txt test-requirements.txt services/pyproject.toml testbed/pyproject.toml
	@bash scripts/setup-venv.sh "$(PYTHON)" "$(VENV)"
	@touch $(STAMP)

## test: everything CI runs — ruff, mypy, unit and integration tests (both engines), molecule, collection build +
## secret scan, ansible-test sanity and units, ansible-lint (production), antsibull-changelog lint
test: setup services kube
	@bash scripts/test-all.sh "$(MAKE)" "$(PY)" -q $(PARALLEL) --durations=30 --junitxml=build/pytest.xml

## checks: everything `make test` runs besides pytest (scripts/test-all.sh runs it beside pytest)
checks: lint molecule check-build sanity ansible-lint

## kube: build the real engine's Kubernetes binaries once into a cache outside the checkout
## (~/.cache/qonnect/kube/VERSION/bin; QONNECT_KUBE_CACHE moves it) and link .venv/bin/kubectl;
## and helm, for {helm: CHART_DIR} manifest entries (~/.cache/qonnect/helm/VERSION-bBUILD/bin,
## QONNECT_HELM_CACHE; .venv/bin/helm)
kube: setup
	@bash scripts/build-kube.sh >/dev/null
	@bash scripts/build-helm.sh >/dev/null

## services: install and start what the tests need (PostgreSQL with the test role and database)
services:
	@bash scripts/setup-services.sh

## check: the inner loop while working (a few minutes): ruff, then the unit, contract and fast
## integration tests in parallel (everything not marked slow or kube); `make test` is the full suite
check: setup services
	$(BIN)/ruff check .
	$(PY) -m pytest tests -q $(PARALLEL) -m "not slow and not kube" --durations=10

unit: setup
	$(PY) -m pytest tests/unit -q

integration: setup services kube
	$(PY) -m pytest tests/integration -q

## molecule: the scenario under extensions/molecule (converge, idempotence, verify on localhost)
molecule: setup
	$(BIN)/molecule test

## lint: ruff (check and format --check) and mypy
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory typecheck

## typecheck: mypy on plugins/module_utils and the qonnect services (settings in mypy.ini)
typecheck: setup
	$(BIN)/mypy

## sanity: ansible-test sanity on a copy of the collection at an ansible_collections/ path
sanity: setup
	@bash scripts/sanity.sh "$(SANITY_ROOT)"

build: setup
	@mkdir -p $(DIST)
	$(BIN)/ansible-galaxy collection build --force --output-path $(DIST) .

## check-build: the tarball holds no secrets, installs into a fresh path, ansible-doc renders every plugin
check-build: build
	@bash scripts/check-build.sh "$(DIST)"

## ansible-lint: ansible-lint (production profile), antsibull-changelog lint, ansible-test units
ansible-lint: setup
	@bash scripts/lint-ansible.sh "$(UNITS_ROOT)"

## ee: the execution environment's build context (build/ee/context) from the built tarball;
## `ansible-builder build -f execution-environment.yml` (podman or docker) makes the image
ee: build
	@mkdir -p build/ee
	@cp "$(DIST)/qonnect-core-$(COLLECTION_VERSION).tar.gz" build/ee/qonnect-core.tar.gz
	$(BIN)/ansible-builder create -f execution-environment.yml -c build/ee/context

## changelog: CHANGELOG.rst from changelogs/ (antsibull-changelog; fragments are kept)
changelog: setup
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog release --version $(COLLECTION_VERSION)

## demo: QONNECT's evaluation end to end on the embedded default (nine emulated clusters, SQLite
## KB, an agent per cluster, three controller replicas); leaves it running for exploration
demo: setup
	$(BIN)/qonnect demo up --dir "$(DEMO_DIR)"

## demo-kube: the same five steps on nine real control planes (qonnect testbed up --engine kube;
## ~4.2 GiB, minutes to set up; docs/demo.md)
demo-kube: setup kube
	$(BIN)/qonnect demo up --engine kube --dir "$(DEMO_DIR)"

## demo-down: stop everything `make demo` started
demo-down: setup
	@if [ -f "$(DEMO_DIR)/demo.json" ]; then $(BIN)/qonnect demo down --dir "$(DEMO_DIR)"; else echo "no demo running in $(DEMO_DIR)"; fi

## plan: print the placement of the Bookinfo example on QONNECT's nine clusters (no services)
plan: setup
	$(BIN)/qonnect plan --spec examples/bookinfo/energy-first.yml --inventory examples/inventories/paper.json

clean:
	rm -rf build $(VENV) .pytest_cache .ruff_cache
