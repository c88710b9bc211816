#!/usr/bin/env bash
# The workspace root's .sqlx/ is the canonical query cache (`cargo sqlx prepare --workspace`
# writes it); the published runledger-engine crate carries a copy, which its query macros read
# when it is built from the registry. This script brings the copy in line with the cache.
# (migrations/ needs no copy: the root's is a link to runledger-engine/migrations/, which the
# engine's MIGRATOR embeds.)
#
#   scripts/sync-engine-assets.sh          copy .sqlx/ into runledger-engine/
#   scripts/sync-engine-assets.sh --check  exit 1 (listing the differences) if the copy drifted
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--check" ]; then
    if ! diff -r .sqlx runledger-engine/.sqlx; then
        echo "runledger-engine/.sqlx differs from the workspace root's .sqlx;" >&2
        echo "run scripts/sync-engine-assets.sh and commit the result" >&2
        exit 1
    fi
    echo "runledger-engine/.sqlx matches the workspace root's .sqlx"
    exit 0
fi

rm -rf runledger-engine/.sqlx
cp -r .sqlx runledger-engine/.sqlx
echo "synced .sqlx/ into runledger-engine/"
