#!/usr/bin/env bash
# Fetches the reference models of the `onnx` package from PyPI: its wheel ships real model
# graphs (ResNet50, SqueezeNet, DenseNet121, ... as "light" models) and operator tests with
# reference inputs and outputs under onnx/backend/test/data. Only the wheel is downloaded
# (no install, nothing imported); its test data is unpacked into target/onnx-testdata,
# where tests/onnx_reference.rs reads it. Idempotent: does nothing if it is there.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.23.2
dest=target/onnx-testdata
if [ -f "$dest/.onnx-$version" ]; then
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: "onnx==$version" -d "$work"
wheel=$(ls "$work"/onnx-"$version"-*.whl)
rm -rf "$dest"
mkdir -p "$dest"
python3 - "$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "onnx/backend/test/data/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            z.extract(name, dest)
PY
touch "$dest/.onnx-$version"
echo "onnx $version test data in $dest/onnx/backend/test/data"
