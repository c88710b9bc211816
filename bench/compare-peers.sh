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

# The median of the numbers on standard input, one per line.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Medians of the rates and of each round's ratios to its own ceiling.
echo
echo "| system ($N no-op jobs, median of $REPS rounds) | jobs/s | ratio to the ceiling |"
echo "| --- | ---: | ---: |"
names=("raw-SQL ceiling" "runledger, defaults" "graphile_worker")
for column in 1 2 3; do
    rate=$(printf '%s\n' "${rows[@]}" | awk -v c="$column" '{ print $c }' | median)
    ratio=$(printf '%s\n' "${rows[@]}" | awk -v c="$column" '{ print $c / $1 }' | median)
    printf '| %s | %.0f | %.2f |\n' "${names[column - 1]}" "$rate" "$ratio"
done
