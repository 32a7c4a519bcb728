#!/usr/bin/env bash
# The long fuzz run: every fuzz_ test of both crates with MANUS_FUZZ_CASES cases per target
# (default 200000; 9 targets, so 1.8 million in all), then the count per target and the
# total. The normal `cargo test` (and so CI, through scripts/test.sh) runs the same targets
# with 256 cases each, a few seconds in all. memory_trimming is the slowest, as it counts
# tokens: in a debug build some 5 ms a case, so --release for a million.
#   scripts/fuzz.sh                      # debug build
#   MANUS_FUZZ_CASES=1000000 scripts/fuzz.sh --release
# Extra arguments go to cargo (e.g. --release). A seed the output names replays its case:
#   MANUS_FUZZ_SEED=<seed> MANUS_FUZZ_CASES=1 cargo test -p <crate> --lib <test>
set -uo pipefail
export MANUS_FUZZ_CASES="${MANUS_FUZZ_CASES:-200000}"
out=$(mktemp)
status=0
for crate in manus-actors manus-rt; do
    cargo test "$@" -p "$crate" --lib fuzz_ -- --nocapture --test-threads=2 2>&1 | tee -a "$out" || status=1
done
echo "--- fuzz summary"
grep -aE '^fuzz [a-z_]+: [0-9]+ cases' "$out"
grep -aE '^fuzz [a-z_]+: [0-9]+ cases' "$out" |
    awk '{ cases += $3; bad += $5 } END { printf "total: %d cases, %d panicked\n", cases, bad }'
rm -f "$out"
exit $status
