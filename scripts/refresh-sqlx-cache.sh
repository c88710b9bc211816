#!/usr/bin/env bash
# Regenerates the sqlx offline query cache from the migrations, then syncs the engine's copy of
# it (scripts/sync-engine-assets.sh).
#
#   scripts/refresh-sqlx-cache.sh          rewrite .sqlx/ and the engine's copy
#   scripts/refresh-sqlx-cache.sh --check  fail if .sqlx/ does not match the queries, or the copy drifted
#
# Needs psql, sqlx-cli 0.9 (`cargo install sqlx-cli --version '^0.9' --no-default-features
# --features postgres,rustls,sqlx-toml`) and DATABASE_URL naming a server where a scratch
# database may be created (default: the local trust-auth server).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
scratch_db=runledger_sqlx_cache
scratch_url="${server%/*}/$scratch_db"

psql "$server" -qc "DROP DATABASE IF EXISTS $scratch_db" -c "CREATE DATABASE $scratch_db"
trap 'psql "$server" -qc "DROP DATABASE IF EXISTS $scratch_db" >/dev/null 2>&1 || true' EXIT
for migration in migrations/*.sql; do
    psql "$scratch_url" -q -v ON_ERROR_STOP=1 -f "$migration" >/dev/null
done

# The engine's sqlx.toml names RUNLEDGER_SQLX_DATABASE_URL as the only variable its query macros
# read a live database from; `cargo sqlx prepare` itself reads DATABASE_URL.
export DATABASE_URL="$scratch_url" RUNLEDGER_SQLX_DATABASE_URL="$scratch_url"
if [ "$mode" = "--check" ]; then
    cargo sqlx prepare --workspace --check
    scripts/sync-engine-assets.sh --check
else
    cargo sqlx prepare --workspace
    scripts/sync-engine-assets.sh
fi
