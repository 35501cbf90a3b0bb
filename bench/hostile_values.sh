#!/usr/bin/env bash
# Hostile values, seen from outside the process (docs/RELIABILITY.md, "A client's values
# against the devices"): the default config.toml serves the zoo and PyTorch's exported
# nn.Embedding from the onnx wheel's test data (pytorch-converted/test_Embedding: one
# Gather from a table of 4 rows, its batch dimension made symbolic). A separate Python
# client sends, for SECS seconds and open loop, mlp requests at 40/s, embedding requests
# with indices in range at 40/s, and embedding requests with an index out of range at
# HOSTILE/s; it prints the answers of each class by status and error type, and the
# server's device outages.
# Usage: bench/hostile_values.sh BIN OUT [SECS] [HOSTILE]   (defaults 10 s, 4/s)
# BACKEND=ort: the devices run ONNX Runtime (its library from scripts/onnxruntime.sh
# unless ORT_DYLIB_PATH names one) instead of tract.
set -u
bin=$(realpath "$1"); out=$2; secs=${3:-10}; hostile=${4:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
py=$(scripts/edge_python.sh)
scripts/onnx_testdata.sh > /dev/null
rm -rf "$out"; mkdir -p "$out/models/embedding/1"; out=$(realpath "$out")
"$py" - "$out/models/embedding" <<'PY'
import pathlib, sys
import onnx
source = "target/onnx-testdata/onnx/backend/test/data/pytorch-converted/test_Embedding/model.onnx"
model = onnx.load(source)
graph = model.graph
weights = {t.name for t in graph.initializer}
# An old exporter lists the table among the inputs too (IR version 3 asks it to): it is
# a weight, not an input, which IR version 4 allows saying.
kept = [i for i in graph.input if i.name not in weights]
del graph.input[:]
graph.input.extend(kept)
model.ir_version = max(model.ir_version, 4)
for value in list(graph.input) + list(graph.output):
    value.type.tensor_type.shape.dim[0].dim_param = "batch"
onnx.checker.check_model(model)
home = pathlib.Path(sys.argv[1])
onnx.save(model, home / "1" / "model.onnx")
(home / "config.toml").write_text('slo = "100ms"\nmax_batch_size = 8\n')
PY
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" \
    -e "s|^path = \"models\"|path = \"$out/models\"|" config.toml > "$out/config.toml"
sed -i -e "s|^backend = \"auto\"|backend = \"${BACKEND:-cpu}\"|" "$out/config.toml"
if [ "${BACKEND:-cpu}" = ort ]; then
    sed -i -e 's|^backend = "cpu"|backend = "ort"|' -e 's|^\[devices.cpu\]|[devices.ort]|' \
        "$out/config.toml"
    ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/onnxruntime.sh)}
    export ORT_DYLIB_PATH
fi
"$bin" serve --config "$out/config.toml" > "$out/server.log" 2>&1 & pid=$!
for _ in $(seq 1 600); do
    curl -sf "localhost:$port/v2/models/embedding/ready" > /dev/null &&
        curl -sf "localhost:$port/v2/models/mlp/ready" > /dev/null && break
    sleep 0.2
done
"$py" - "$port" "$secs" "$hostile" <<'PY' | tee "$out/answers.txt"
import collections, concurrent.futures, json, sys, threading, time, urllib.error, urllib.request
port, secs, hostile = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
base = f"http://127.0.0.1:{port}/v2/models"
mlp = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 256],
                   "data": [0.01 * i for i in range(256)]}]}
def lookup(first):
    return {"inputs": [{"name": "0", "datatype": "INT64", "shape": [1, 4],
                        "data": [first, 1, 2, 3]}]}
counts = collections.defaultdict(collections.Counter)
lock = threading.Lock()
def send(kind, model, body):
    request = urllib.request.Request(f"{base}/{model}/infer", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
            what = str(answer.status)
    except urllib.error.HTTPError as e:
        what = f"{e.code} {json.loads(e.read()).get('error_type', '')}"
    except OSError as e:
        what = type(e).__name__
    with lock:
        counts[kind][what] += 1
classes = [("mlp", "mlp", lambda i: mlp, 40.0),
           ("embedding in range", "embedding", lambda i: lookup(i % 4), 40.0),
           ("embedding out of range", "embedding", lambda i: lookup(1_000_000_000), hostile)]
schedule = sorted((n / rate, kind, model, make)
                  for kind, model, make, rate in classes if rate > 0
                  for n in range(int(secs * rate)))
start = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    for i, (at, kind, model, make) in enumerate(schedule):
        time.sleep(max(0.0, start + at - time.monotonic()))
        pool.submit(send, kind, model, make(i))
for kind, _, _, _ in classes:
    print(f"{kind}: {dict(sorted(counts[kind].items()))}")
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
for line in metrics.splitlines():
    if line.startswith("clockwork_device_outages"):
        print(line)
PY
kill -TERM $pid; wait $pid
