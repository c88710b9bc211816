#!/usr/bin/env bash
# Runledger beside graphile_worker on the same server, as ratios to the raw-SQL ceiling of the
# same round: the table of docs/benchmarks.md ("Beside another queue").
#
#   bash bench/compare-peers.sh
#   N=20000 REPS=5 DATABASE_URL=postgres://user@host:5432/postgres bash bench/compare-peers.sh
#
# Each round drains N no-op jobs three ways, each in a database it recreates on the server of
# DATABASE_URL (default: postgres://postgres@127.0.0.1:5432/postgres): the raw-SQL ceiling and
# Runledger at `JobsConfig::default()` (`runledger-bench --only burn-down`), and graphile_worker
# (bench/peers/graphile-worker, a project of its own). Rounds alternate which runs first.
# Prints each round, then the medians.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-50000}
REPS=${REPS:-3}
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
target=${CARGO_TARGET_DIR:-$root/target}

cargo build --quiet --release --manifest-path "$root/Cargo.toml" -p runledger-bench
cargo build --quiet --release --manifest-path "$root/bench/peers/graphile-worker/Cargo.toml" \
    --target-dir "$target/peers"
runledger_bench="$target/release/runledger-bench"
graphile="$target/peers/release/peer-graphile-worker"

# The first number of the line of $1 that starts with $2.
figure() { grep "^$2" <<<"$1" | head -n1 | grep -oE '[0-9]+ jobs/s' | grep -oE '^[0-9]+'; }

runledger_side() {
    local out
    out=$("$runledger_bench" --only burn-down --jobs "$N")
    ceiling=$(figure "$out" "ceiling:")
    runledger=$(figure "$out" "burn-down at defaults (")
}
graphile_side() {
    graphile_worker=$(figure "$("$graphile" "$N")" "graphile_worker burn-down:")
}

rows=()
for round in $(seq 1 "$REPS"); do
    if ((round % 2)); then runledger_side; graphile_side; else graphile_side; runledger_side; fi
    echo "round $round: ceiling $ceiling, runledger $runledger, graphile_worker $graphile_worker jobs/s"
    rows+=("$ceiling $runledger $graphile_worker")
done

# Medians of the rates and of each round's ratios to its own ceiling.
printf '%s\n' "${rows[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, line.split())) for line in sys.stdin if line.strip()]
median = lambda xs: statistics.median(xs)
print()
print(f"| system ({sys.argv[1]} no-op jobs, median of {len(rows)} rounds) | jobs/s | ratio to the ceiling |")
print("| --- | ---: | ---: |")
for column, name in enumerate(["raw-SQL ceiling", "runledger, defaults", "graphile_worker"]):
    rate = median([r[column] for r in rows])
    ratio = median([r[column] / r[0] for r in rows])
    print(f"| {name} | {rate:,.0f} | {ratio:.2f} |")
' "$N"
