#!/usr/bin/env bash
# The overload bench with the zoo's device emulated, so that the load generator gets a
# core of its own on a 2-core host: the whole server (HTTP worker, decoders, controller,
# metrics, and one `sim` device that runs each zoo model at its measured times) on core 0,
# `clockwork loadgen` on core 1. What the server does under the burst when its client is
# elsewhere, which the real bench cannot show here (its device holds core 1 and the
# client shares the front end's). An experiment, not issue 15's benchmark: the device is
# emulated, and its timers wait for core 0 like everything else on it (bench/emulate.py).
#
#   bench/overload/emulated.sh --bin PATH [--kind ort|cpu] [--config FILE] [run.sh's arguments...]
#
# First serves the zoo once with the configuration to profile it (ONNX Runtime
# where ORT_DYLIB_PATH names its library, else tract; `--kind` picks the profile's
# record), then runs bench/overload/run.sh on one `sim` device taking those times.
#
# `--config` names the configuration both steps start from (config.toml by default): a
# copy with one policy option changed compares it under the same emulation.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=""
kind=ort
base=config.toml
rest=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$(realpath "$2"); shift 2 ;;
        --kind) kind=$2; shift 2 ;;
        --config) base=$(realpath "$2"); shift 2 ;;
        *) rest+=("$1"); shift ;;
    esac
done
[ -n "$bin" ] || { echo "--bin PATH is needed" >&2; exit 2; }
# `work` and its cleanup (the server stopped, the directory removed on exit),
# `serve_until_ready`, `free_port`.
# shellcheck source=../../scripts/serve_lib.sh
source scripts/serve_lib.sh
port=$(free_port)

# 1. Profile: the configuration, its zoo written into $work/repo, until ready.
sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" -e "s|^path = \"models\"|path = \"$work/repo\"|" \
    "$base" > "$work/profile.toml"
serve_until_ready "$bin" "$work/profile.toml" "http://127.0.0.1:$port/v2/health/ready"

# 2. The bench on one sim device taking the profiles' times; server on core 0, client on 1.
python3 bench/emulate.py repository "$work/repo" "$kind"
python3 bench/emulate.py config "$base" "$work/repo" > "$work/emulated.toml"
bench/overload/run.sh --bin "$bin" --config "$work/emulated.toml" --server-cores 0 \
    --client-cores 1 "${rest[@]}"
