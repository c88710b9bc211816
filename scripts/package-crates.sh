#!/usr/bin/env bash
# Packages every publishable crate and checks that each could be published, in dependency order:
# runledger-names, runledger-cron, runledger-engine, runledger-macros, runledger, runledger-cli.
# None of them is on the registry yet, so `cargo package` with all six builds each archive on
# its own against a local registry overlay holding the archives packaged before it (siblings
# resolve there, everything else on crates.io); `cargo publish --workspace --dry-run` then runs
# the registry's own checks on the same set and stops before uploading. Last, it checks what
# the archives carry.
#
#   scripts/package-crates.sh                 what CI runs
#   scripts/package-crates.sh --allow-dirty   with uncommitted changes
#
# The archives stay in $CARGO_TARGET_DIR/package/ (default target/package/).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> package: %s\n' "$*"; }

target_dir=${CARGO_TARGET_DIR:-target}
publishable=(runledger-names runledger-cron runledger-engine runledger-macros runledger runledger-cli)
package_args=()
for crate in "${publishable[@]}"; do package_args+=(-p "$crate"); done

# Cargo takes a registry crate of a given version as immutable: it reuses the overlay's archive
# unpacked under $CARGO_HOME/registry/src/-<hash>/ and its build in the target directory without
# looking at the new archive, so a second run would verify against the first run's sources.
# Drop both (the unpacked copies are caches; cargo clean -p removes every build of the name).
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
for crate in "${publishable[@]}"; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$crate-$version"
done
cargo clean --quiet "${package_args[@]}"

log "cargo package ${package_args[*]} $*"
rm -f "$target_dir"/package/*.crate
cargo package "${package_args[@]}" "$@"

# Verified just above: the dry run only adds the registry's checks.
log "cargo publish --workspace --dry-run --no-verify $*"
cargo publish --workspace --dry-run --no-verify "$@"

log "one archive per publishable crate, and no other"
packaged=$(cd "$target_dir/package" && ls -- *.crate | sed -E 's/-[0-9]+\.[0-9]+\.[0-9]+[^.]*\.crate$//' | sort)
diff <(printf '%s\n' "${publishable[@]}" | sort) <(printf '%s\n' "$packaged")
printf '%s\n' "$packaged"

log "the operator tool's archive installs the binary runledger"
manifest_of() { tar -xzOf "$1" "$(basename "$1" .crate)/Cargo.toml"; }
cli_manifest=$(manifest_of "$(ls "$target_dir"/package/runledger-cli-[0-9]*.crate)")
grep -A2 '^\[\[bin\]\]' <<<"$cli_manifest" | grep -qx 'name = "runledger"'

log "no archive names a repository or homepage"
for crate in "$target_dir"/package/*.crate; do
    if manifest_of "$crate" | grep -qE '^(repository|homepage) ='; then
        echo "$(basename "$crate") names a repository or homepage" >&2
        exit 1
    fi
done
log "PASS"
