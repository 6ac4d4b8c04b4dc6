#!/usr/bin/env bash
# Build and run cargo-fuzz targets for a fixed time each.
#
#   fuzz/run.sh TARGET SECONDS      one target
#   fuzz/run.sh all SECONDS         every target in turn
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Each target starts from its seeds (fuzz/seeds/TARGET, read only) and its
# working corpus (fuzz/corpus/TARGET, kept between runs, not committed),
# with the ext4/jbd2 dictionary; one process (no -fork), nice'd. A crash
# leaves its input in fuzz/artifacts/TARGET/; the script goes on with the
# next target and exits 1 at the end if any crashed. The last line per
# target gives its executions. FUZZ_ARGS adds libFuzzer flags.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
if [ $# -ne 2 ]; then
    echo "usage: $0 TARGET|all SECONDS" >&2
    exit 2
fi
target=$1 secs=$2
all=(superblock group_desc inode extent dir htree xattr_block xattr_ibody bitmap
     jbd2_superblock jbd2_descriptor jbd2_commit jbd2_revoke journal volume)
if [ "$target" = all ]; then targets=("${all[@]}"); else targets=("$target"); fi

# Release code with debug assertions and overflow checks (cargo fuzz's
# default), no sanitizer: the engine is safe Rust, and without ASan the
# targets run about twice as fast.
build_args=(-s none)
[ "$target" = all ] || build_args+=("$target")
if ! nice cargo +nightly fuzz build "${build_args[@]}"; then
    echo "fuzz/run.sh: build failed" >&2
    exit 1
fi
bin=$here/target/x86_64-unknown-linux-gnu/release
failed=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log=artifacts/$t/last-run.log
    # shellcheck disable=SC2086
    nice "$bin/$t" "corpus/$t" "seeds/$t" -dict=ext4.dict -max_total_time="$secs" \
        -timeout=30 -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" -print_final_stats=1 ${FUZZ_ARGS:-} > "$log" 2>&1
    rc=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        failed+=("$t")
        echo "$t: CRASH after ${runs:-?} runs ($cov); log $here/$log:"
        grep -E "panicked|ERROR|Test unit written|SUMMARY" "$log" | head -5
    else
        echo "$t: ${runs:-?} runs in ${secs}s ($cov), no crash"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashed: ${failed[*]}"
    exit 1
fi
