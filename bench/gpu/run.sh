#!/usr/bin/env bash
# Builds the GPU probe and runs it once: prints the table, writes the JSON.
#
#   bench/gpu/run.sh [OUT.json] [extra gpu-probe flags...]
#
# OUT defaults to bench/gpu/results.json. With the default 1000 runs per
# batch size this takes about a minute on a datacenter GPU, plus the build.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"

out="${1:-bench/gpu/results.json}"
shift || true  # no arguments at all is fine: every flag has a default

cargo build --release --features cuda --bin gpu-probe
mkdir -p "$(dirname "$out")"
"${CARGO_TARGET_DIR:-target}/release/gpu-probe" --out "$out" "$@"
