#!/usr/bin/env bash
# perf_analyzer over HTTP (its default), over gRPC (-i grpc) and over Triton's gRPC stream
# (-i grpc --streaming), one after the other against one `clockwork serve` and one model:
# throughput and p99 of each.
#
# Usage: bench/grpc/compare.sh [MODEL] [CONCURRENCY]   (defaults: mlp 4)
# `mlp` is the emulated mlp-small on a sim V100 (the front end's cost shows); `cnn` is the
# zoo's cnn on a cpu device. Needs ../shared/tools/perf_analyzer (or PERF_ANALYZER).
# PROFILE=debug measures the debug build (default: release); BIN=PATH a binary built
# elsewhere (nothing is built then).
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-mlp}
concurrency=${2:-4}
pa=${PERF_ANALYZER:-../shared/tools/perf_analyzer}
[ -x "$pa" ] || pa=/work/shared/tools/perf_analyzer

profile=${PROFILE:-release}
bin=${BIN:-$PWD/target/$profile/clockwork}
if [ -n "${BIN:-}" ]; then
    :
elif [ "$profile" = release ]; then
    cargo build --locked --quiet --release --bin clockwork
else
    cargo build --locked --quiet --bin clockwork
fi
# shellcheck source=../../scripts/serve_lib.sh
source scripts/serve_lib.sh

cat > "$work/config.toml" <<'TOML'
[server]
listen = "127.0.0.1:0"
grpc_listen = "127.0.0.1:0"
[[devices]]
backend = "sim"
profile = "v100"
[[models]]
name = "mlp"
profile = "mlp-small"
[[devices]]
backend = "cpu"
[repository]
path = "models"
generate_zoo = true
load_all = false
profile_runs = 3
TOML

start_server "$bin"
http=$address
grpc=$(await_log 's/.*serving gRPC grpc=\([^ ]*\).*/\1/p')
if [ "$model" != mlp ]; then
    curl -sf -X POST "http://$http/v2/repository/models/$model/load" > /dev/null
fi
# A cold model's first requests are refused while its weights load: measure a warm one
# (ready, and a second for the edge's view of it to settle).
for _ in $(seq 1 100); do
    curl -sf "http://$http/v2/models/$model/ready" > /dev/null && break
    sleep 0.1
done
sleep 1

for protocol in http grpc grpc-stream; do
    flags=(-u "$grpc" -i grpc)
    case $protocol in
        http) flags=(-u "$http" -i http) ;;
        grpc-stream) flags+=(--streaming) ;;
    esac
    "$pa" -m "$model" "${flags[@]}" --concurrency-range "$concurrency" \
        --measurement-interval 5000 --stability-percentage 50 --max-trials 5 \
        -f "$work/$protocol.csv" > "$work/$protocol.out" 2>&1 || { echo "$protocol:"; cat "$work/$protocol.out"; tail -5 "$work/log"; exit 1; }
done
python3 - "$work" "$model" "$concurrency" <<'PY'
import csv, sys
work, model, concurrency = sys.argv[1:]
print(f"| protocol | model | concurrency | infer/s | p50 ms | p99 ms |")
print("| --- | --- | --- | --- | --- | --- |")
for protocol in ("http", "grpc", "grpc-stream"):
    row = next(csv.DictReader(open(f"{work}/{protocol}.csv")))
    ms = lambda key: float(row[key]) / 1000
    print(f"| {protocol} | {model} | {concurrency} | {float(row['Inferences/Second']):.1f} "
          f"| {ms('p50 latency'):.2f} | {ms('p99 latency'):.2f} |")
PY
