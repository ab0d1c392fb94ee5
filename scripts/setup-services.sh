#!/usr/bin/env bash
# Install and start the services the test suite needs on a fresh Debian machine: a PostgreSQL
# server on 127.0.0.1:5432 with a password role `qonnect` that may create databases, and the
# database `test` that the KB tests connect to first (tests/integration/kb/conftest.py); and
# debootstrap and openssh-client for the real-target test.
# Idempotent: a second run only checks that everything is up.
set -euo pipefail

role=${QONNECT_PG_ROLE:-qonnect}
password=${QONNECT_PG_PASSWORD:-qonnect}
database=${QONNECT_PG_DATABASE:-test}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "services: need root (or sudo) to run: $*" >&2; return 1
  fi
}

if ! command -v pg_ctlcluster >/dev/null || ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  echo "services: installing PostgreSQL from Debian's packages" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

# The real-target test (tests/integration/user_path/test_real_target.py) builds a Debian root with
# debootstrap (scripts/target-root.sh) and reaches it over SSH with a generated key.
if ! command -v debootstrap >/dev/null || ! command -v ssh-keygen >/dev/null; then
  echo "services: installing debootstrap and openssh-client from Debian's packages" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap openssh-client >/dev/null
fi

version=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n1)
if [ -z "$version" ]; then
  echo "services: no PostgreSQL cluster under /etc/postgresql" >&2; exit 1
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 60); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.5; done
fi
pg_isready -h 127.0.0.1 -p 5432 -q || { echo "services: PostgreSQL did not start" >&2; exit 1; }

psql_admin() { as_root su postgres -c "psql -v ON_ERROR_STOP=1 -qtA $*"; }
if [ "$(psql_admin "-c \"SELECT 1 FROM pg_roles WHERE rolname = '$role'\"")" != 1 ]; then
  psql_admin "-c \"CREATE ROLE $role LOGIN CREATEDB PASSWORD '$password'\""
fi
if [ "$(psql_admin "-c \"SELECT 1 FROM pg_database WHERE datname = '$database'\"")" != 1 ]; then
  psql_admin "-c \"CREATE DATABASE $database OWNER $role\""
fi
echo "services: PostgreSQL $version on 127.0.0.1:5432, role $role, database $database"
