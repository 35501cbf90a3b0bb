#!/usr/bin/env bash
# Makes the virtual environment the edge benchmarks' Python runs in (`target/edge-venv`:
# onnx, aiohttp, numpy and tritonclient[grpc] from PyPI) and prints its interpreter's
# absolute path. Idempotent: installs nothing once the environment has them.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/edge-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import onnx, aiohttp, numpy, tritonclient.grpc' 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        onnx aiohttp numpy 'tritonclient[grpc]' >&2
fi
echo "$PWD/$venv/bin/python"
