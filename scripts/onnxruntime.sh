#!/usr/bin/env bash
# Installs ONNX Runtime's shared library for the `ort` backend: the `onnxruntime` wheel
# from PyPI (it ships libonnxruntime.so) into a virtual environment under target/, and
# prints the library's path. Export it as ORT_DYLIB_PATH (or name it as `library` in a
# `[devices.ort]` table) to serve on `backend = "ort"` devices. Idempotent: installs
# nothing when the pinned version is there.
#
# The version is pinned with the `ort` crate in Cargo.toml: ort 2.0.0-rc.15 speaks ONNX
# Runtime's C API 31 (feature api-31), which onnxruntime 1.31 provides. Change both together.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.31.1
venv=target/onnxruntime-venv
if [ ! -f "$venv/.onnxruntime-$version" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: "onnxruntime==$version" >&2
    touch "$venv/.onnxruntime-$version"
fi
library=$(find "$PWD/$venv" -path '*onnxruntime/capi/libonnxruntime.so*' -type f | sort | head -n 1)
if [ -z "$library" ]; then
    echo "onnxruntime $version is installed in $venv but ships no libonnxruntime.so" >&2
    exit 1
fi
echo "$library"
