#!/usr/bin/env bash
# The long fuzz run of docs/RELIABILITY.md: every tests/fuzz_*.rs target with FUZZ_CASES
# inputs per target (default 1,000,000; the API targets over HTTP get a hundredth, the
# whole-directory `prepare` target, which profiles a model per input, a tenth).
# Usage: bench/fuzz.sh [cases]   (release build, one test binary at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-1000000}"
start=$(date +%s)
for target in fuzz_protocol fuzz_config fuzz_onnx fuzz_trace; do
    echo "== $target: FUZZ_CASES=$cases"
    FUZZ_CASES="$cases" cargo test --release --test "$target" -- --test-threads=2
done
echo "== fuzz_prepare: FUZZ_CASES=$((cases / 10))"
FUZZ_CASES="$((cases / 10))" cargo test --release --test fuzz_prepare -- --test-threads=2
echo "== fuzz_api: FUZZ_CASES=$((cases / 100))"
FUZZ_CASES="$((cases / 100))" cargo test --release --test fuzz_api -- --test-threads=1
echo "== done in $(( $(date +%s) - start )) s"
