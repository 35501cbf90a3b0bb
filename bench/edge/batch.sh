#!/usr/bin/env bash
# Client-side batches: Triton's perf_analyzer with -b 1 and -b 8 (requests of 1 and 8
# items) against `clockwork serve` on the default config.toml, serving one zoo model
# (or `--model squeezenet`, the edge benchmark's, see README.md) alone from a temporary
# repository. Prints perf_analyzer's throughput (inferences, i.e.
# items, per second) and p99 latency per batch size. Always stops the server.
#
#   bench/edge/batch.sh [--bin PATH] [--model NAME] [--concurrency N] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=""
model=mlp
concurrency=4
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --concurrency) concurrency=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    cargo build --locked --quiet --release --bin clockwork
    bin=target/release/clockwork
fi
bin=$(realpath "$bin")
pa=${PERF_ANALYZER:-/work/shared/tools/perf_analyzer}

work=$(mktemp -d)
out=${out:-$work/out}
mkdir -p "$out"
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work/repo"
}
trap cleanup EXIT

# The model alone, so that only it is profiled and served.
if [ "$model" = squeezenet ]; then
    scripts/onnx_testdata.sh
    target/edge-venv/bin/python bench/edge/make_squeezenet.py \
        target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo"
else
    "$bin" models generate --dir "$work/repo" --only "$model" > /dev/null
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" \
    -e "s|^path = \"models\"|path = \"$work/repo\"|" \
    -e "s|^generate_zoo = .*|generate_zoo = false|" config.toml > "$work/config.toml"
url=http://127.0.0.1:$port
RUST_LOG=info "$bin" serve --config "$work/config.toml" > "$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
    if curl -sf "$url/v2/models/$model/ready" > /dev/null; then break; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "server died:" >&2; tail "$out/server.log" >&2; exit 1; }
    sleep 0.5
done
grep -m1 "cores:" "$out/server.log" | sed 's/^.*cores:/cores:/' || true

echo "| -b | concurrency | throughput (infer/s) | requests/s | p99 (ms) |"
echo "| --- | --- | --- | --- | --- |"
for b in 1 8; do
    "$pa" -m "$model" -u "127.0.0.1:$port" -i http -b "$b" --concurrency-range "$concurrency" \
        --measurement-interval 5000 --stability-percentage 50 --percentile=99 \
        > "$out/b$b.log" 2>&1 || { echo "perf_analyzer -b $b failed:" >&2; tail -5 "$out/b$b.log" >&2; exit 1; }
    # "Concurrency: 4, throughput: 123.4 infer/sec, latency 5678 usec" (p99 with --percentile).
    line=$(grep -E "^Concurrency:" "$out/b$b.log" | tail -1)
    thr=$(echo "$line" | sed -E 's/.*throughput: ([0-9.]+) infer\/sec.*/\1/')
    lat=$(echo "$line" | sed -E 's/.*latency ([0-9]+) usec.*/\1/')
    python3 -c "print(f'| $b | $concurrency | {$thr:.1f} | {$thr / $b:.1f} | {$lat / 1000:.1f} |')"
done
curl -s "$url/metrics" | grep -E "^nv_inference_(request_success|count|exec_count)\{model=\"$model\"" \
    > "$out/counters.txt" || true
echo -e "\ncounters: $(tr '\n' ' ' < "$out/counters.txt")"
echo "results: $out"
