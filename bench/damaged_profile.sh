#!/usr/bin/env bash
# A damaged profile.json, seen from outside the process (docs/RELIABILITY.md, "Fixed after
# the fuzzing session"): serves the default config.toml in OUT (writing and profiling the
# zoo), stops, edits mlp's stored profile, serves again and sends 100 JSON inferences from
# a separate Python client, 20 ms apart; prints the answers by status and the warning.
# Usage: bench/damaged_profile.sh BIN OUT   (DAMAGE: the Python edit of each record `r`,
# default the batch-1 p99 set to 1e300)
set -u
bin=$(realpath "$1"); out=$2; root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"; mkdir -p "$out"; cd "$out" || exit 1
cp "$root/config.toml" .
start() {
    "$bin" serve --config config.toml --listen 127.0.0.1:18321 > "$1" 2>&1 & pid=$!
    for _ in $(seq 1 600); do
        curl -sf localhost:18321/v2/models/mlp/ready > /dev/null && return 0
        sleep 0.2
    done
    echo "not ready"; exit 1
}
start first.log; kill -TERM $pid; wait $pid
DAMAGE="${DAMAGE:-r['profile']['batches'][0]['latency']['p99'] = 1e300}" python3 - <<'PY'
import json, os
path = 'models/mlp/1/profile.json'
records = json.load(open(path))
for r in records:
    exec(os.environ['DAMAGE'])
json.dump(records, open(path, 'w'))
PY
start second.log
python3 - <<'PY'
import collections, json, time, urllib.error, urllib.request
body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 256],
                               "data": [0.01 * i for i in range(256)]}]}).encode()
url = "http://127.0.0.1:18321/v2/models/mlp/infer"
counts = collections.Counter()
for _ in range(100):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()
            counts[str(answer.status)] += 1
    except urllib.error.HTTPError as e:
        counts[f"{e.code} {json.loads(e.read()).get('error', '')[:50]}"] += 1
    except OSError as e:
        counts[type(e).__name__] += 1
    time.sleep(0.02)
print(dict(counts))
PY
kill -TERM $pid; wait $pid
grep -i "stored profile" second.log | head -2
