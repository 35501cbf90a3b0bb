#!/usr/bin/env bash
# Overload: the default `clockwork serve` (config.toml: cpu devices, the zoo) under
# `clockwork loadgen` at 10x its capacity for 60 s over HTTP, while sample.py polls
# readiness and samples the server's RSS; then a normal load right after. Not in CI.
#
#   bench/overload/run.sh [--bin PATH] [--duration S] [--factor X] [--rate R]
#                         [--max-in-flight N] [--perf DIR] [--client-cores front|any|LIST]
#                         [--server-cores LIST] [--config FILE] [--keep DIR] [--syscalls]
#                         [--squeezenet] [--bursty ON,OFF,FRACTION]
#
# --bursty ON,OFF,FRACTION: the burst alternates ON at full rate and OFF at FRACTION of
# it (loadgen's bursty workload, starting on; e.g. 2s,4s,0.15), --rate or the factor
# giving the mean: every ON period is a burst's onset from a calm spell, with the load
# generator's connections already open after the first.
#
# --squeezenet: adds the onnx wheel's squeezenet (bench/edge/make_squeezenet.py: a model
# nobody here wrote, with 602 KB binary bodies and a 100 ms objective) to the repository,
# beside the zoo: the load generator sends to it like to every other ready model. Its
# bodies are what a burst costs the front-end core in bytes rather than in requests.
# --keep DIR: copies the burst's load-generator report (report.json, report.md: each
# model's answers and latencies), the server's log and its /metrics before and after the
# burst into DIR.
# --config FILE: the server's configuration instead of config.toml (its `listen` is
# replaced by a free port), to compare settings with one build.
# The load generator runs on the server's front-end cores (`front`, the default, read from
# the server's `cores:` line), never on a core a cpu device is pinned to: a real client
# runs on another machine, and one that shares a device's core stretches its runs, so
# the policy admits work the device then cannot finish (`timed_out`). `any` leaves it
# unpinned; a LIST is taskset's. --server-cores LIST starts the server under taskset
# (bench/overload/emulated.sh: the whole server on core 0, its client on core 1).
#
# --max-in-flight N: the burst's load generator's bound on requests outstanding (default
# 1024, loadgen's); arrivals beyond it are `client_overflow`. When the client and server
# together cannot keep up, the window fills and every request waits about N / (requests
# completed per second): a smaller N trades that wait for more overflow.
# --rate R: the burst's rate (requests/s) instead of factor x the measured capacity: on a
# busy machine the capacity swings from run to run, and two builds compared at one rate
# are compared on the same load.
# --syscalls: counts the HTTP workers' system calls (`perf stat` of their threads, for 3 s
# from 5 s into the burst) and prints them per response sent.
# --perf DIR: `perf record -g` of the server and of the load generator during the burst,
# written to DIR/server.data and DIR/loadgen.data (read them with `perf report
# --no-children -i ...`; they are large: delete them after).
#
# Prints: the capacity (a closed-loop run's in-time answers per second), the burst's
# outcomes with refusal latency p50/p99 and accepted answers' p99, when its `timed_out`
# and `overran` refusals arrived, the load generator's
# server_timing.json (each kind of answer's time at the client, in the server and
# outside it), the burst's answers per model by outcome and edge stage, the answers the
# server counted against those the client read (bench/overload/counts.py), each model's
# batches over the burst (bench/overload/batches.py: sizes, device seconds, device time an
# item, from Triton's statistics before and after), readiness during
# the burst, RSS first/max/last, the CPU the server's threads and the load generator used
# over the burst (seconds, and microseconds per offered request), the connections accepted
# during it, and a second of 0.5x capacity before the burst and each of the five seconds
# after it.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=""
duration=60
factor=10
perf_dir=""
fixed_rate=""
in_flight=1024
client_cores=front
server_cores=""
config=config.toml
keep=""
syscalls=0
squeezenet=0
burst_on=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --factor) factor=$2; shift 2 ;;
        --rate) fixed_rate=$2; shift 2 ;;
        --max-in-flight) in_flight=$2; shift 2 ;;
        --perf) perf_dir=$(realpath -m "$2"); mkdir -p "$perf_dir"; shift 2 ;;
        --client-cores) client_cores=$2; shift 2 ;;
        --server-cores) server_cores=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --keep) keep=$(realpath -m "$2"); shift 2 ;;
        --syscalls) syscalls=1; shift ;;
        --squeezenet) squeezenet=1; shift ;;
        --bursty) IFS=, read -r burst_on burst_off burst_off_fraction <<< "$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$bin" ]; then
    cargo build --locked --quiet --release --bin clockwork
    bin=target/release/clockwork
fi
bin=$(realpath "$bin")

work=$(mktemp -d)
server_pid=
sampler_pid=
cleanup() {
    for pid in $sampler_pid $server_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    if [ -n "$keep" ]; then
        mkdir -p "$keep"
        cp -r "$work/burst" "$keep/" 2>/dev/null || true
        cp "$work/log" "$keep/server.log" 2>/dev/null || true
        cp "$work/metrics_before" "$work/metrics_after" "$keep/" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" "$config" > "$work/config.toml"
if [ "$squeezenet" = 1 ]; then
    # The server writes the zoo into its repository beside what is there already.
    scripts/onnx_testdata.sh > /dev/null
    "$(scripts/edge_python.sh)" bench/edge/make_squeezenet.py \
        target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo" > /dev/null
    sed -i -e "/^\[repository\]/,/^\[/ s|^path = .*|path = \"$work/repo\"|" "$work/config.toml"
fi
server_pin=()
[ -n "$server_cores" ] && server_pin=(taskset -c "$server_cores")
(cd "$work" && RUST_LOG=warn,clockwork::serve=info,clockwork::actors::from_config=info exec "${server_pin[@]}" "$bin" serve --config config.toml) 2> "$work/log" &
server_pid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 1 1200); do
    curl -sf "$base/v2/health/ready" > /dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/log"; exit 1; }
    sleep 0.1
done

# Where the load generator runs: off the devices' cores (see the top of this file).
pin=()
if [ "$client_cores" = front ]; then
    # A server without cpu devices (`sim` only) plans no cores and says none: unpinned.
    client_cores=$(grep -m1 "cores:" "$work/log" | sed -n 's/.*front_end_cores=\([0-9,]*\).*/\1/p' || true)
fi
if [ "$client_cores" != any ] && [ -n "$client_cores" ]; then
    pin=(taskset -c "$client_cores")
fi
grep -m1 "cores:" "$work/log" | sed 's/^.*cores:/cores:/' || true
echo "load generator: ${pin[*]:-unpinned}"
loadgen() { "${pin[@]}" "$bin" loadgen "$@"; }

# summary DIR: offered, in time, late, refused, errors, refusal and answer latencies.
summary() {
    python3 - "$1/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
refused = sum(p["refused"].values())
print(json.dumps({
    "offered": p["offered"], "ok_in_slo": p["ok_in_slo"], "late": p["late"],
    "refused": refused, "refused_by": p["refused"], "failed": p["failed"], "errors": p["errors"],
    "goodput_per_s": round(p["ok_in_slo"] / p["wall_s"], 1),
    "answer_p50_ms": p["latency_ms"]["p50"], "answer_p99_ms": p["latency_ms"]["p99"],
    "refusal_p50_ms": p["refusal_ms"]["p50"], "refusal_p99_ms": p["refusal_ms"]["p99"],
    "wall_s": round(p["wall_s"], 2)}))
PY
}

loadgen --url "$base" --workload closed --clients 16 --duration 10s --quiet --out "$work/capacity" 2> /dev/null > /dev/null
capacity=$(summary "$work/capacity" | python3 -c 'import json,sys; print(json.load(sys.stdin)["goodput_per_s"])')
rate=${fixed_rate:-$(python3 -c "print(round($capacity * $factor))")}
echo "capacity: $capacity answers/s in time (closed loop, 16 clients, 10 s); burst: $rate/s ($(python3 -c "print(round($rate / $capacity, 1))")x) for ${duration}s"

# The same normal load before the burst, the reference for "back to normal" below (the
# same seed: the same requests to the same models).
after=$(python3 -c "print(max(1, round($capacity / 2)))")
loadgen --url "$base" --workload poisson --rate "$after" --duration 1s --quiet --out "$work/before" 2> /dev/null > /dev/null
echo "a second before (0.5x, $after/s): $(summary "$work/before")"

# Connections accepted so far: the burst's own are those counted after it, less these.
connections() { curl -s "$base/metrics" | awk '/^clockwork_http_connections_total /{print $2}'; }
connections_before=$(connections)
curl -s "$base/metrics" > "$work/metrics_before"
curl -s "$base/v2/models/stats" > "$work/stats_before"
python3 bench/overload/sample.py --base "$base" --pid "$server_pid" --stop "$work/stop" > "$work/sample.json" &
sampler_pid=$!
workload=(--workload poisson)
if [ -n "$burst_on" ]; then
    workload=(--workload bursty --burst-on "$burst_on" --burst-off "$burst_off" --burst-off-fraction "$burst_off_fraction")
fi
"${pin[@]}" "$bin" loadgen --url "$base" "${workload[@]}" --rate "$rate" --duration "${duration}s" --max-in-flight "$in_flight" --quiet --out "$work/burst" 2> /dev/null > /dev/null &
loadgen_pid=$!
perf_pids=""
if [ -n "$perf_dir" ]; then
    perf record -F 999 -g -o "$perf_dir/server.data" -p "$server_pid" -- sleep "$duration" > /dev/null 2>&1 &
    perf_pids="$!"
    perf record -F 999 -g -o "$perf_dir/loadgen.data" -p "$loadgen_pid" -- sleep "$duration" > /dev/null 2>&1 &
    perf_pids="$perf_pids $!"
fi
if [ "$syscalls" = 1 ]; then
    (
        sleep 5
        tids=$(grep -lx http /proc/"$server_pid"/task/*/comm | cut -d/ -f5 | paste -sd, -)
        perf stat -x, -t "$tids" -o "$work/syscalls.csv" -e syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,context-switches,task-clock -- sleep 3
    ) > /dev/null 2>&1 &
    perf_pids="$perf_pids $!"
fi
# The load generator's CPU: its /proc stat, read until it exits (the last reading counts).
loadgen_cpu=0
while kill -0 "$loadgen_pid" 2> /dev/null; do
    loadgen_cpu=$(awk -v t="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$loadgen_pid/stat" 2> /dev/null || echo "$loadgen_cpu")
    sleep 0.2
done
wait "$loadgen_pid"
touch "$work/stop"
wait "$sampler_pid"
sampler_pid=
for pid in $perf_pids; do wait "$pid" || true; done
echo "burst: $(summary "$work/burst")"
# When the refusals that waited arrived (the load generator's buckets of a sixtieth of the
# burst): a burst's onset, or spread over it.
python3 - "$work/burst/report.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
waited = {f'{b["t_s"]:.2f}': sum(b["answers"].get(k, 0) for k in ("timed_out", "overran"))
          for b in p.get("outcomes_over_time", [])}
print("burst, timed_out and overran by arrival (bucket start s: count):",
      json.dumps({t: n for t, n in waited.items() if n}))
PY
python3 - "$work/burst/report.json" "$loadgen_cpu" "$work/sample.json" <<'PY'
import json, sys
offered = json.load(open(sys.argv[1]))["policies"][0]["offered"]
loadgen = float(sys.argv[2])
server = json.load(open(sys.argv[3]))["server_cpu_s"]
us = lambda s: round(s / max(offered, 1) * 1e6, 1)
print("cpu over the burst:", json.dumps({"loadgen_s": loadgen, "server_s": server,
      "loadgen_us_per_offered": us(loadgen), "server_us_per_offered": us(server)}))
PY
if [ -s "$work/syscalls.csv" ]; then
    python3 - "$work/syscalls.csv" <<'PY'
import json, sys
counts = {}
for row in open(sys.argv[1]):
    fields = row.strip().split(",")
    if len(fields) > 2 and fields[0].replace(".", "").isdigit():
        counts[fields[2].split(":")[-1]] = float(fields[0])
sent = max(counts.get("sys_enter_sendto", 0), 1)
print("http workers, 3 s of the burst:", json.dumps({
    "responses": int(sent),
    "write_per_response": round(counts.get("sys_enter_write", 0) / sent, 2),
    "recvfrom_per_response": round(counts.get("sys_enter_recvfrom", 0) / sent, 2),
    "context_switches": int(counts.get("context-switches", 0)),
    "cpu_us_per_response": round(counts.get("task-clock", 0) * 1000 / sent, 1)}))
PY
fi
[ -f "$work/burst/server_timing.json" ] && echo "server-side time (Server-Timing edge): $(cat "$work/burst/server_timing.json")"
# Where the server refused: the edge's stages, and every model's answers by outcome.
curl -s "$base/metrics" | python3 -c '
import collections, json, re, sys
stages, outcomes = collections.Counter(), collections.Counter()
for line in sys.stdin:
    m = re.match(r"clockwork_edge_refusals\{.*stage=\"(\w+)\".*\} (\S+)", line)
    if m: stages[m[1]] += float(m[2])
    m = re.match(r"clockwork_requests\{.*outcome=\"(\w+)\".*\} (\S+)", line)
    if m: outcomes[m[1]] += float(m[2])
print("server, since start: edge refusals by stage", json.dumps({k: int(v) for k, v in stages.items() if v}),
      "answers by outcome", json.dumps({k: int(v) for k, v in outcomes.items() if v}))'

echo "during the burst: $(cat "$work/sample.json")"
# The burst's own answers per model or pipeline: outcomes and the edge's refusals by stage;
# and per pipeline stage, its sub-requests' outcomes (already in their model's).
curl -s "$base/metrics" > "$work/metrics_after"
curl -s "$base/v2/models/stats" > "$work/stats_after"
python3 - "$work/metrics_before" "$work/metrics_after" <<'PY'
import collections, re, sys
def read(path):
    counts = collections.Counter()
    for line in open(path):
        m = re.match(r'clockwork_(requests|edge_refusals|edge_late|pipeline_stage_requests)\{(.*)\} (\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[2]))
        # A stage's sub-requests (also in their model's counts): keyed by pipeline/stage.
        if m[1] == "pipeline_stage_requests":
            labels["model"] = f'{labels["pipeline"]}/{labels["stage"]} (sub-requests)'
        # edge_late: answers that left the server after their deadline from the edge.
        kind = labels.get("outcome") or ("edge_" + labels["stage"] if "stage" in labels else "late_at_edge")
        counts[(labels.get("model", "?"), kind)] += float(m[3])
    return counts
diff = read(sys.argv[2])
diff.subtract(read(sys.argv[1]))
models = sorted({model for model, _ in diff})
for model in models:
    row = {kind: int(v) for (m, kind), v in sorted(diff.items()) if m == model and v}
    print(f"burst, {model}: {row}")
PY
# Each request counted once: the server's counts against the answers the client read.
[ -f "$work/burst/server_timing.json" ] &&
    python3 bench/overload/counts.py "$work/metrics_before" "$work/metrics_after" "$work/burst/server_timing.json"
# The burst's batches per model (Triton's statistics): how the device's time was spent.
python3 bench/overload/batches.py "$work/stats_before" "$work/stats_after"
echo "connections accepted during the burst: $(( $(connections) - ${connections_before:-0} ))"

# Normal load again, one second at a time: how soon it is served as before the burst.
for second in 1 2 3 4 5; do
    loadgen --url "$base" --workload poisson --rate "$after" --duration 1s --quiet --out "$work/after$second" 2> /dev/null > /dev/null
    echo "second $second after (0.5x, $after/s): $(summary "$work/after$second")"
done
kill -0 "$server_pid" 2>/dev/null && echo "server: still up"
