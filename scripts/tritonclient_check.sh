#!/usr/bin/env bash
# Runs scripts/tritonclient_check.py (Triton's Python HTTP client) and
# scripts/tritonclient_grpc_check.py (its gRPC client) against a real `clockwork serve`
# on free ports. Installs tritonclient[http,grpc] and numpy from PyPI into a virtual
# environment under target/ on first use. Always stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tritonclient-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import tritonclient.http, tritonclient.grpc, numpy' 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'tritonclient[http,grpc]' numpy
fi

cargo build --locked --quiet --bin clockwork
# shellcheck source=serve_lib.sh
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

# A one-stage pipeline of the built-in `mlp`, loaded through the repository route.
mkdir -p "$work/models/chain"
cat > "$work/models/chain/config.toml" <<'TOML'
[pipeline]
slo = "200ms"
inputs = [{ name = "x", datatype = "FP32", shape = [64] }]
outputs = ["y"]

[[pipeline.stages]]
name = "only"
model = "mlp"
input_map = { input = "x" }
output_map = { output = "y" }
TOML

start_server "$PWD/target/debug/clockwork"
grpc_address=$(await_log 's/.*serving gRPC grpc=\([^ ]*\).*/\1/p')

timeout 120 "$venv/bin/python" scripts/tritonclient_check.py "$address"
timeout 120 "$venv/bin/python" scripts/tritonclient_grpc_check.py "$grpc_address" "$address"

# Graceful shutdown: SIGTERM exits 0.
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
[ "$status" -eq 0 ] || { cat "$work/log"; echo "server exited $status after SIGTERM" >&2; exit 1; }
