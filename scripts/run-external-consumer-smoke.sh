#!/usr/bin/env bash
# External-consumer smoke test: package the publishable crates, unpack the `.crate` archives, and
# build the host crate in smoke/ against them (through [patch.crates-io]) outside this
# repository, with none of its .cargo/config.toml and with DATABASE_URL naming a fresh database
# that has no Runledger schema. Then run the host: it migrates, starts a Worker, runs a typed job
# and a typed workflow over TLS (sslmode=require), shuts down and must exit 0.
#
#   scripts/run-external-consumer-smoke.sh
#
# DATABASE_URL names the server to use (default: the local trust-auth server); the database
# runledger_smoke is created on it and dropped at the end. Builds go to smoke/ under the target
# directory ($CARGO_TARGET_DIR, default target/) so that a second run is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> smoke: %s\n' "$*"; }

server=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
server=${server%%\?*}
smoke_db=runledger_smoke
smoke_url="${server%/*}/$smoke_db"
work=$(mktemp -d /tmp/runledger-smoke.XXXXXX)
cleanup() {
    psql "$server" -qc "DROP DATABASE IF EXISTS $smoke_db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

log "packaging the crates"
crates=(runledger-names runledger-cron runledger-engine runledger-macros runledger runledger-cli)
package_args=()
for crate in "${crates[@]}"; do package_args+=(-p "$crate"); done
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
package_dir="$target_dir/package"
rm -f "$package_dir"/*.crate
cargo package --allow-dirty --no-verify --quiet "${package_args[@]}"

log "the engine's package carries its migrations and its query cache"
listing=$(cargo package --allow-dirty --list -p runledger-engine)
grep -E '^migrations/[0-9]+_.*\.sql$' <<<"$listing"
printf '%s query files under .sqlx/\n' "$(grep -cE '^\.sqlx/query-.*\.json$' <<<"$listing")"
diff <(ls migrations) <(grep -E '^migrations/' <<<"$listing" | sed 's|^migrations/||')
diff <(ls .sqlx) <(grep -E '^\.sqlx/' <<<"$listing" | sed 's|^\.sqlx/||')

log "unpacking into $work/crates"
mkdir -p "$work/crates"
for crate in "${crates[@]}"; do
    tar -xzf "$package_dir/$crate"-[0-9]*.crate -C "$work/crates"
done

log "preparing the host crate in $work/host"
cp -r smoke "$work/host"
cp Cargo.lock "$work/host/Cargo.lock"
{
    echo
    echo "[workspace]"
    echo
    echo "[patch.crates-io]"
    for crate in runledger-names runledger-cron runledger-engine runledger-macros runledger; do
        dir=$(ls -d "$work/crates/$crate"-[0-9]*)
        echo "$crate = { path = \"$dir\" }"
    done
} >>"$work/host/Cargo.toml"

psql "$server" -qc "DROP DATABASE IF EXISTS $smoke_db WITH (FORCE)" -c "CREATE DATABASE $smoke_db"
tables=$(psql "$smoke_url" -qAtc "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'runledger'")
echo "tables in schema runledger before the build: $tables"

export CARGO_TARGET_DIR="$target_dir/smoke"
cd "$work/host"
# Nothing of this repository's cargo configuration reaches the host build.
unset SQLX_OFFLINE SQLX_OFFLINE_DIR RUNLEDGER_SQLX_DATABASE_URL

log "building with DATABASE_URL unset"
cargo clean --quiet -p runledger-engine -p runledger 2>/dev/null || true
env -u DATABASE_URL cargo build --quiet

log "building with DATABASE_URL naming the unmigrated database $smoke_db"
cargo clean --quiet -p runledger-engine -p runledger
DATABASE_URL="$smoke_url" cargo build --quiet

log "the host resolves Runledger to the unpacked archives"
cargo tree --quiet --depth 1 --edges normal | grep -E '^.── runledger'

log "running the host with DATABASE_URL=$smoke_url?sslmode=require"
DATABASE_URL="$smoke_url?sslmode=require" "$CARGO_TARGET_DIR/debug/runledger-smoke"

tables=$(psql "$smoke_url" -qAtc "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'runledger'")
echo "tables in schema runledger after the run: $tables"
log "PASS"
