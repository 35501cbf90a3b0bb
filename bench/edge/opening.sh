#!/usr/bin/env bash
# A rate's opening, again and again: the edge bench's server (squeezenet and the zoo, the
# default config.toml), the JSON capacity probe (3 closed-loop clients, 4 s), then
# `client.py` at one rate and seed for a short time, several times 1 s apart, each
# opening the same arrivals. Prints, per opening, the requests failed (refused, or
# answered after the objective), the slowest time in the server (Server-Timing `edge`)
# and at the client, and what the server's memory did (minor page faults, resident
# memory). The first opening after the probe is the first time the server holds that
# many bodies at once (docs/EXPERIMENTS.md, "The first cluster and fresh memory").
#
#   bench/edge/opening.sh [--bin PATH] [--config FILE] [--runs N] [--rate R]
#                         [--seed S] [--seconds T] [--format json|binary] [--out DIR]
#
# Defaults: the release build of this tree, config.toml, 3 openings of 0.4 s at 271/s
# (0.8x of this host's capacity), seed 7, JSON bodies. Export ORT_DYLIB_PATH (from
# scripts/onnxruntime.sh) for the default `backend = "auto"` to run ONNX Runtime. Linux
# only (reads /proc). Not in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=target/release/clockwork
config=config.toml
runs=3
rate=271
seed=7
seconds=0.4
format=json
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --format) format=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

py=$(scripts/edge_python.sh)
scripts/onnx_testdata.sh
[ -x "$bin" ] || cargo build --release --locked
bin=$(realpath "$bin")

# shellcheck source=../../scripts/serve_lib.sh
source scripts/serve_lib.sh
out=${out:-$(mktemp -d)}
mkdir -p "$out"
"$py" bench/edge/make_squeezenet.py \
    target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo" > /dev/null
sed -e 's|^listen = .*|listen = "127.0.0.1:0"|' \
    -e "s|^path = \"models\"|path = \"$work/repo\"|" "$config" > "$work/config.toml"
start_server "$bin"
url=http://$address
for _ in $(seq 1 600); do
    curl -sf "$url/v2/models/squeezenet/ready" > /dev/null && break
    sleep 0.2
done
# The clients on the server's front-end cores, as bench/edge/run.sh runs them.
cores=$(grep -m1 "cores:" "$work/log" | sed -n 's/.*front_end_cores=\([0-9,]*\).*/\1/p')
pin=()
[ -n "$cores" ] && pin=(taskset -c "$cores")
client() {
    "${pin[@]}" "$py" bench/edge/client.py --url "$url" --model squeezenet "$@"
}
# Minor page faults (field 10 of stat) and resident memory (KiB) of the server.
memory() {
    echo "$(awk '{print $10}' "/proc/$server_pid/stat") $(awk '/VmRSS/ {print $2}' "/proc/$server_pid/status")"
}

client --until-ok --duration 20 --format binary > /dev/null
client --closed-loop 3 --duration 4 --format "$format" > /dev/null
echo "opening,failed,sent,max_edge_ms,max_latency_ms,minor_faults,rss_growth_mib"
for i in $(seq 1 "$runs"); do
    sleep 1
    read -r faults_before rss_before <<< "$(memory)"
    client --rate "$rate" --seed "$seed" --duration "$seconds" --format "$format" \
        --log "$out/opening-$i.jsonl" > "$out/opening-$i.json"
    read -r faults_after rss_after <<< "$(memory)"
    "$py" - "$out/opening-$i.jsonl" "$i" $((faults_after - faults_before)) \
        $((rss_after - rss_before)) <<'EOF'
import json, sys
path, i, faults, rss_kib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(line) for line in open(path)]
objective_ms = 100.0
failed = sum(1 for r in rows if r["status"] != 200 or r["latency_ms"] > objective_ms)
edge = max((r["edge_ms"] or 0.0) for r in rows)
latency = max(r["latency_ms"] for r in rows)
print(f"{i},{failed},{len(rows)},{edge:.1f},{latency:.1f},{faults},{rss_kib / 1024:.1f}")
EOF
done
grep -m1 "memory:" "$work/log" | sed 's/^.*memory:/memory:/' || true
cp "$work/log" "$out/server.log"
