#!/usr/bin/env bash
# The edge bench with squeezenet's device emulated, so that a client gets a core of its
# own on a 2-core host: the whole server (HTTP worker, decoders, controller and one `sim`
# device that runs squeezenet at its measured ONNX Runtime times) pinned to core 0, the
# client on core 1 (`--client-cores 1`) or on core 0 with the server (`--client-cores 0`).
# What the front end does when its client is elsewhere, which the real bench cannot show
# here (its device has core 1). An experiment, not issue 11's benchmark: the device is
# emulated. See docs/EXPERIMENTS.md, "The edge judges by the policy's rule".
#
#   bench/edge/emulated.sh --bin PATH [--kind ort|cpu] [run.sh's arguments...]
#
# First starts the default server on squeezenet once to profile it (ONNX Runtime where
# ORT_DYLIB_PATH names its library, else tract; `--kind` picks the profile's record),
# then runs bench/edge/run.sh with a configuration of one `sim` device whose squeezenet
# takes that profile's times.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=""
kind=ort
rest=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$(realpath "$2"); shift 2 ;;
        --kind) kind=$2; shift 2 ;;
        *) rest+=("$1"); shift ;;
    esac
done
[ -n "$bin" ] || { echo "--bin PATH is needed" >&2; exit 2; }
py=$(scripts/edge_python.sh)
scripts/onnx_testdata.sh
# `work` and its cleanup (the server stopped, the directory removed on exit),
# `serve_until_ready`, `free_port`.
# shellcheck source=../../scripts/serve_lib.sh
source scripts/serve_lib.sh
"$py" bench/edge/make_squeezenet.py \
    target/onnx-testdata/onnx/backend/test/data/light/light_squeezenet.onnx "$work/repo" > /dev/null
port=$(free_port)

# 1. Profile: the default configuration on this repository (no zoo), until ready.
sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" -e "s|^path = \"models\"|path = \"$work/repo\"|" \
    -e 's|^generate_zoo = true|generate_zoo = false|' config.toml > "$work/profile.toml"
serve_until_ready "$bin" "$work/profile.toml" "http://127.0.0.1:$port/v2/models/squeezenet/ready"
# 2. The bench on one sim device whose squeezenet takes the profile's times, the server
#    pinned to core 0.
"$py" bench/emulate.py repository "$work/repo" "$kind"
"$py" bench/emulate.py config config.toml "$work/repo" > "$work/emulated.toml"
printf '#!/bin/sh\nexec taskset -c 0 %s "$@"\n' "$bin" > "$work/pinned.sh"
chmod +x "$work/pinned.sh"
bench/edge/run.sh --bin "$work/pinned.sh" --config "$work/emulated.toml" "${rest[@]}"
