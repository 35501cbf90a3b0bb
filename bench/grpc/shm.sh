#!/usr/bin/env bash
# perf_analyzer with the tensors in its requests against the tensors in system shared
# memory (`--shared-memory system`: Triton's extension, regions perf_analyzer creates and
# registers), over HTTP and over gRPC, against the default `clockwork serve` and the onnx
# wheel's squeezenet (600 KB in, 4 KB out per item): throughput and p99 at each
# concurrency, and what each request cost the front end: the server's CPU outside its
# devices' threads, and perf_analyzer's own, per request the server answered.
#
# Usage: bench/grpc/shm.sh [--bin PATH] [--config FILE] [--concurrency 1:4] [--rounds N]
#                          [--out DIR]
# perf_analyzer runs pinned to the front end's core (taskset, as the edge bench's
# clients), one mode after the other, `--rounds` times (default 2) in turns.
# Prints one table; DIR keeps each run's output, CSV and CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=target/release/clockwork
config=config.toml
concurrency=1:4
rounds=2
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --concurrency) concurrency=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
pa=${PERF_ANALYZER:-/work/shared/tools/perf_analyzer}

py=$(scripts/edge_python.sh)
scripts/onnx_testdata.sh
[ -x "$bin" ] || cargo build --release --locked
bin=$(realpath "$bin")

# shellcheck source=../../scripts/serve_lib.sh
source scripts/serve_lib.sh
out=${out:-$work/out}
mkdir -p "$out"
"$py" bench/edge/make_squeezenet.py \
    target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo" > /dev/null
sed -e '/^grpc_listen = /d' \
    -e 's|^listen = .*|listen = "127.0.0.1:0"\ngrpc_listen = "127.0.0.1:0"|' \
    -e "s|^path = \"models\"|path = \"$work/repo\"|" "$config" > "$work/config.toml"
start_server "$bin"
http=$address
grpc=$(await_log 's/.*serving gRPC grpc=\([^ ]*\).*/\1/p')
for _ in $(seq 1 600); do
    curl -sf "http://$http/v2/models/squeezenet/ready" > /dev/null && break
    sleep 0.2
done
front=$(sed -n 's/.*front_end_cores=\([0-9,]*\).*/\1/p' "$work/log" | head -n 1)
pin=()
[ -n "$front" ] && pin=(taskset -c "$front")
echo "server: $bin; perf_analyzer: ${pin[*]:-unpinned}"

# Requests the server has answered for squeezenet, every outcome.
answered() {
    curl -sf "http://$http/metrics" |
        awk '/^clockwork_requests\{/ && /model="squeezenet"/ { n += $NF } END { print n + 0 }'
}

run() {
    local mode=$1 name=$2
    local flags=(-u "$http" -i http)
    case $mode in grpc*) flags=(-u "$grpc" -i grpc) ;; esac
    case $mode in *-shm) flags+=(--shared-memory system) ;; esac
    local before
    before=$(answered)
    "$py" bench/edge/cpu.py snapshot "$server_pid" > "$out/$name.before.json"
    set +e
    /usr/bin/time -f "%U %S" -o "$out/$name.time" timeout 300 "${pin[@]}" "$pa" -m squeezenet \
        "${flags[@]}" --concurrency-range "$concurrency" --measurement-interval 3000 \
        --stability-percentage 50 -f "$out/$name.csv" > "$out/$name.out" 2>&1
    local rc=$?
    set -e
    "$py" bench/edge/cpu.py used "$out/$name.before.json" "$server_pid" > "$out/$name.cpu.json"
    echo $(($(answered) - before)) > "$out/$name.answered"
    [ $rc -eq 0 ] || echo "$name: perf_analyzer exited $rc: $(grep -m1 -iE 'error' "$out/$name.out" || tail -1 "$out/$name.out")"
}

for round in $(seq 1 "$rounds"); do
    for mode in http http-shm grpc grpc-shm; do
        run "$mode" "$mode-$round"
    done
done
"$py" bench/grpc/shm_table.py "$out"
