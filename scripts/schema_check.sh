#!/usr/bin/env bash
# Schema-driven API testing: schemathesis (from PyPI, into a virtual environment under
# target/ on first use) generates requests from /v2/openapi.json of a real
# `clockwork serve` on a free port and checks every answer: no 5xx but the documented
# refusals, statuses, content types and bodies as documented. Bounded in time for CI
# (--max-time, and a fixed number of cases per operation); prints how many cases ran.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/schemathesis-venv
if [ ! -x "$venv/bin/schemathesis" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'schemathesis==4.*'
fi

cargo build --locked --quiet --bin clockwork
# shellcheck source=serve_lib.sh
source scripts/serve_lib.sh

# A slack objective: generated requests that are valid should be answered, not refused
# because this shared machine is slow.
cat > "$work/config.toml" <<'TOML'
[server]
listen = "127.0.0.1:0"
[[devices]]
backend = "sim"
profile = "v100"
[[models]]
name = "mlp"
profile = "mlp-small"
slo = "10s"
[[models]]
name = "spare"
profile = "mlp-small"
slo = "10s"
TOML

start_server "$PWD/target/debug/clockwork" warn,clockwork::serve=info

# Path parameters name the served model and its version, so generated requests reach the
# handlers' own checks instead of stopping at 404 unknown_model. Load and unload work on
# `spare`: an unloaded `mlp` would answer the other operations 503 model_unavailable (a
# documented refusal, but one that would hide everything behind it).
cat > "$work/schemathesis.toml" <<'TOML'
[parameters]
"path.model" = "mlp"
"path.version" = "1"

[[operations]]
include-path-regex = "^/v2/repository/models/"
parameters = { "path.model" = "spare" }
TOML

cases="${SCHEMA_CHECK_CASES:-25}"
timeout 300 "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "http://$address/v2/openapi.json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$cases" --max-time 100 --seed 1 --workers 2 --no-color \
    --generation-database none | tee "$work/out" \
    || { tail -n 50 "$work/log"; exit 1; }
# Its summary's count ("N generated, N passed"), for the log and docs/RELIABILITY.md.
echo "schemathesis: $(grep -o '[0-9]* generated, [0-9]* passed' "$work/out" | tail -n 1) (up to $cases per operation and phase)"
kill -0 "$server_pid" 2>/dev/null || { cat "$work/log"; echo "the server died" >&2; exit 1; }
