#!/usr/bin/env bash
# The workspace root's migrations/ and .sqlx/ are the canonical sources; the published
# runledger-engine crate carries copies of both (its MIGRATOR embeds migrations/, its query
# macros read .sqlx/). This script brings the copies in line with the sources.
#
#   scripts/sync-engine-assets.sh          copy the sources into runledger-engine/
#   scripts/sync-engine-assets.sh --check  exit 1 (listing the differences) if a copy drifted
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=("migrations:runledger-engine/migrations" ".sqlx:runledger-engine/.sqlx")

if [ "${1:-}" = "--check" ]; then
    drift=0
    for pair in "${pairs[@]}"; do
        source=${pair%%:*} copy=${pair##*:}
        if ! diff -r "$source" "$copy"; then
            drift=1
        fi
    done
    if [ "$drift" -ne 0 ]; then
        echo "runledger-engine's copies of migrations/ or .sqlx/ differ from the workspace root's;" >&2
        echo "run scripts/sync-engine-assets.sh and commit the result" >&2
        exit 1
    fi
    echo "runledger-engine/migrations and runledger-engine/.sqlx match the canonical copies"
    exit 0
fi

for pair in "${pairs[@]}"; do
    source=${pair%%:*} copy=${pair##*:}
    rm -rf "$copy"
    cp -r "$source" "$copy"
done
echo "synced migrations/ and .sqlx/ into runledger-engine/"
