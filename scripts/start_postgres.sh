#!/usr/bin/env bash
# Start a local PostgreSQL server for PostgreSQL-checkpointed threads and the `postgres` tests (idempotent).
# Installs Debian's `postgresql` package if it is missing, starts the cluster, creates the role and database
# (default mas / mas / mas_test), and prints the connection URL on stdout (progress goes to stderr):
#   export MAS_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh)
# Needs root (or passwordless sudo) for apt-get and for acting as the `postgres` system user.
set -euo pipefail
PG_USER="${PG_USER:-mas}"
PG_PASSWORD="${PG_PASSWORD:-mas}"
PG_DB="${PG_DB:-mas_test}"
PG_PORT="${PG_PORT:-5432}"
say() { echo "[postgres] $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
as_postgres() { if [ "$(id -u)" = 0 ]; then su postgres -c "$1"; else sudo -n -u postgres bash -c "$1"; fi; }

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  say "installing Debian's postgresql package"
  as_root apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq postgresql >&2
fi
cluster=$(pg_lsclusters --no-header | awk -v port="$PG_PORT" '$3 == port {print $1" "$2; exit}')
if [ -z "$cluster" ]; then
  version=$(ls /usr/lib/postgresql | sort -n | tail -1)
  say "creating cluster $version main on port $PG_PORT"
  as_root pg_createcluster "$version" main --port "$PG_PORT" >&2
  cluster="$version main"
fi
read -r version name <<<"$cluster"
if pg_lsclusters --no-header | awk -v v="$version" -v n="$name" '$1 == v && $2 == n {print $4}' | grep -q online; then
  say "cluster $version/$name already online on port $PG_PORT"
else
  say "starting cluster $version/$name on port $PG_PORT"
  as_root pg_ctlcluster "$version" "$name" start >&2
fi
for _ in $(seq 1 30); do
  as_postgres "pg_isready -q -p $PG_PORT" && break
  sleep 0.5
done
if [ "$(as_postgres "psql -p $PG_PORT -tAc \"SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'\"")" != 1 ]; then
  say "creating role $PG_USER"
  as_postgres "psql -q -p $PG_PORT -c \"CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD'\"" >&2
fi
if [ "$(as_postgres "psql -p $PG_PORT -tAc \"SELECT 1 FROM pg_database WHERE datname='$PG_DB'\"")" != 1 ]; then
  say "creating database $PG_DB owned by $PG_USER"
  as_postgres "createdb -p $PG_PORT -O $PG_USER $PG_DB" >&2
fi
say "ready: postgresql://$PG_USER:***@127.0.0.1:$PG_PORT/$PG_DB"
echo "postgresql://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB"
