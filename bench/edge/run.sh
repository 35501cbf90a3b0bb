#!/usr/bin/env bash
# The edge benchmark: the default `clockwork serve` plus the onnx wheel's squeezenet,
# driven from outside by an open-loop Poisson client (bench/edge/client.py: JSON and binary
# bodies over HTTP, and `shm`, the input in a system shared-memory region, not run unless
# named; bench/grpc/stream_load.py: one gRPC stream through Triton's Python stubs) and by
# Triton's perf_analyzer. See bench/edge/README.md.
#
#   bench/edge/run.sh [--bin PATH] [--config FILE] [--devices N|auto] [--backend cpu|ort|auto]
#                     [--duration S] [--out DIR] [--client-cores front|any|LIST] [--trace]
#                     [--capacity R] [--perf-analyzer-runs N] [--formats "json binary grpc"]
#                     [--loads "0.25 0.5 0.8 1 1.5 2"]
#
# --capacity R: the loads are multiples of R answers/s instead of the capacity measured
# (still measured and printed): two builds or settings compared at the same rates, where
# this host's measured capacity swings by half between runs.
#
# The clients (client.py, perf_analyzer) run on the server's front-end cores (`front`,
# the default, read from the server's `cores:` line), never on a core a device is pinned
# to: a real client runs on another machine, and one that shares a device's core stretches
# its runs (see docs/EXPERIMENTS.md, "Where the light-load refusals came from"). `any`
# leaves them unpinned (the scheduler's choice, as before), a LIST is taskset's.
# --trace logs each batch and each refusal or late answer with its times
# (`clockwork::api::trace` at debug level) into server.log; `trace.py DIR` reads them.
#
# --backend cpu|ort|auto turns the configuration's cpu and auto groups into groups of that
# backend (ort: ONNX Runtime, the library from scripts/onnxruntime.sh unless
# ORT_DYLIB_PATH names one); without it the configuration is served as it is (the
# default's `auto` runs ONNX Runtime where ORT_DYLIB_PATH names its library, else tract:
# the server's line saying which is printed).
#
# --formats and --loads: the bodies and the multiples of the capacity to run (all of
# them by default, `shm` only when named), to study one rate again and again without the
# others between.
#
# --perf-analyzer-runs N: after the warm-up, only perf_analyzer (concurrency 1 to 4), N
# times back to back, one line each (whether it completed, its throughput at 4), then a
# count: its completing is one of issue 11's targets, and one run says little on a host
# whose stalls come and go.
#
# Prints a markdown table (client-side goodput, late, refused, p50/p99, refusal p99) for
# 0.25x .. 2x of the measured capacity, JSON and binary bodies and a gRPC stream, and
# whether perf_analyzer completed. Always stops the server.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=""
devices=""
duration=10
out=""
config=config.toml
backend=""
client_cores=front
trace=0
fixed_capacity=""
pa_runs=0
formats="json binary grpc"
loads="0.25 0.5 0.8 1 1.5 2"
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --devices) devices=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --client-cores) client_cores=$2; shift 2 ;;
        --trace) trace=1; shift ;;
        --capacity) fixed_capacity=$2; shift 2 ;;
        --perf-analyzer-runs) pa_runs=$2; shift 2 ;;
        --formats) formats=$2; shift 2 ;;
        --loads) loads=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

py=$(scripts/edge_python.sh)
scripts/onnx_testdata.sh
if [ -z "$bin" ]; then
    cargo build --locked --quiet --release --bin clockwork
    bin=target/release/clockwork
fi
bin=$(realpath "$bin")

work=$(mktemp -d)
out=${out:-$work/out}
mkdir -p "$out"
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work/repo"
}
trap cleanup EXIT

# The default configuration, on a free port, with a repository holding the zoo and
# squeezenet (and the device count asked for, if any).
"$py" bench/edge/make_squeezenet.py \
    target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo"
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
grpc_port=$(free_port)
sed -e '/^grpc_listen = /d' \
    -e "s|^listen = .*|listen = \"127.0.0.1:$port\"\ngrpc_listen = \"127.0.0.1:$grpc_port\"|" \
    -e "s|^path = \"models\"|path = \"$work/repo\"|" "$config" > "$work/config.toml"
if [ -n "$devices" ]; then
    [ "$devices" = auto ] && devices='"auto"'
    sed -i "s|^count = .*|count = $devices|" "$work/config.toml"
fi
if [ -n "$backend" ]; then
    sed -i -e "s/^backend = \"\(cpu\|auto\)\"/backend = \"$backend\"/" "$work/config.toml"
fi
if [ "$backend" = ort ]; then
    sed -i -e 's|^\[devices.cpu\]|[devices.ort]|' "$work/config.toml"
    if [ -z "${ORT_DYLIB_PATH:-}" ]; then
        ORT_DYLIB_PATH=$(scripts/onnxruntime.sh)
        export ORT_DYLIB_PATH
    fi
fi
url=http://127.0.0.1:$port
log_filter=info
[ "$trace" = 1 ] && log_filter=info,clockwork::api::trace=debug
RUST_LOG=$log_filter "$bin" serve --config "$work/config.toml" > "$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
    if curl -sf "$url/v2/models/squeezenet/ready" > /dev/null; then break; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "server died:" >&2; tail "$out/server.log" >&2; exit 1; }
    sleep 0.5
done
grep -m1 "cores:" "$out/server.log" | sed 's/^.*cores:/cores:/' || true
grep -m1 'backend "auto" runs' "$out/server.log" | sed 's/^.*devices: /devices: /' || true

# Where the clients run: off the devices' cores (see the top of this file).
pin=()
if [ "$client_cores" = front ]; then
    # A server without cpu devices (`sim` only) plans no cores and says none: unpinned.
    client_cores=$(grep -m1 "cores:" "$out/server.log" | sed -n 's/.*front_end_cores=\([0-9,]*\).*/\1/p' || true)
fi
if [ "$client_cores" != any ] && [ -n "$client_cores" ]; then
    pin=(taskset -c "$client_cores")
fi
echo "clients: ${pin[*]:-unpinned}"

client() { "${pin[@]}" "$py" bench/edge/client.py --url "$url" --model squeezenet --objective-ms 100 "$@"; }

# Warm-up: until squeezenet answers once (a model that no device holds yet is refused).
client --until-ok --duration 60 --format binary --out "$out/warmup.json" > /dev/null
"$py" -c "import json; r=json.load(open('$out/warmup.json')); print(f'warm-up: {r[\"offered\"]} request(s) until the first answer, refused {r[\"refused_by_type\"]}')"

# Triton's own load tool at concurrency 1 to 4 into LOG: does it complete without an
# error? Prints one line saying so; answers perf_analyzer's exit status.
pa=${PERF_ANALYZER:-/work/shared/tools/perf_analyzer}
perf_analyzer() {
    local log=$1 rc
    set +e
    timeout 300 "${pin[@]}" "$pa" -m squeezenet -u "127.0.0.1:$port" -i http --concurrency-range 1:4 \
        --measurement-interval 3000 --stability-percentage 50 > "$log" 2>&1
    rc=$?
    set -e
    if [ $rc -eq 0 ]; then
        echo "perf_analyzer (concurrency 1:4): completed; $(grep -E '^Concurrency: 4' "$log" || true)"
    else
        echo "perf_analyzer (concurrency 1:4): FAILED (exit $rc): $(grep -m1 -iE 'had error|error' "$log" || tail -1 "$log")"
    fi
    return $rc
}

if [ "$pa_runs" -gt 0 ]; then
    [ -x "$pa" ] || { echo "perf_analyzer not found at $pa" >&2; exit 1; }
    failed=0
    for i in $(seq 1 "$pa_runs"); do
        echo -n "run $i: "
        perf_analyzer "$out/perf_analyzer-$i.log" || failed=$((failed + 1))
    done
    echo "perf_analyzer failed in $failed of $pa_runs runs"
    echo "results: $out"
    exit 0
fi

# Capacity: what the server answers per second, back to back, binary bodies, with one
# client more than there are cores.
clients=$(( $(nproc) + 1 ))
client --closed-loop "$clients" --duration 8 --format binary --out "$out/capacity.json" > /dev/null
capacity=$("$py" -c "import json; print(json.load(open('$out/capacity.json'))['ok_per_s'])")
echo "capacity: $capacity answers/s ($clients closed-loop clients, binary)"
if [ "$capacity" = "0.0" ]; then
    echo "no answer at all: nothing to measure against" >&2
    exit 1
fi
# JSON's own capacity, for reading the JSON rows: its bodies cost the front-end core far
# more than binary ones (decoding), and where that core is the bound it is below the
# device's. The rates stay multiples of the binary capacity.
client --closed-loop "$clients" --duration 8 --format json --out "$out/capacity-json.json" > /dev/null
echo "capacity with JSON bodies: $("$py" -c "import json; print(json.load(open('$out/capacity-json.json'))['ok_per_s'])") answers/s ($clients closed-loop clients)"
if [ -n "$fixed_capacity" ]; then
    capacity=$fixed_capacity
    echo "loads as multiples of $capacity answers/s (--capacity)"
fi
# The same pause before the first rate as before every other: without it the first rate
# began within half a second of the saturating probe, on the front-end times it left.
sleep 1

for format in $formats; do
    for x in $loads; do
        rate=$("$py" -c "print(round($capacity * $x, 2))")
        began=$(date -u +%s.%N)
        "$py" bench/edge/cpu.py snapshot "$server_pid" > "$out/cpu-before.json"
        if [ "$format" = grpc ]; then
            "${pin[@]}" "$py" bench/grpc/stream_load.py --url "127.0.0.1:$grpc_port" \
                --model squeezenet --objective-ms 100 --rate "$rate" --duration "$duration" \
                --seed 7 --out "$out/$format-$x.json" --log "$out/$format-$x.requests.jsonl" > /dev/null
        else
            client --rate "$rate" --duration "$duration" --format "$format" --seed 7 \
                --out "$out/$format-$x.json" --log "$out/$format-$x.requests.jsonl" > /dev/null
        fi
        echo "$format-$x $began $(date -u +%s.%N)" >> "$out/phases.txt"
        "$py" bench/edge/cpu.py used "$out/cpu-before.json" "$server_pid" > "$out/cpu-$format-$x.json"
        curl -s "$url/metrics" > "$out/metrics-$format-$x.txt" || true
        sleep 1 # let the last answers drain before the next rate
    done
done

echo
"$py" "$(dirname "$0")/table.py" "$out"

if [ -x "$pa" ]; then
    echo
    if perf_analyzer "$out/perf_analyzer.log"; then
        grep -E "^Concurrency:" "$out/perf_analyzer.log" || true
    fi
else
    echo "perf_analyzer not found at $pa: skipped"
fi
curl -s "$url/metrics" | grep -E '^clockwork_loads' > "$out/loads.txt" || true
echo -e "\nloads: $(tr '\n' ' ' < "$out/loads.txt")"
echo "results: $out"
