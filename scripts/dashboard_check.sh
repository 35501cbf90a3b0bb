#!/usr/bin/env bash
# The dashboard in a real browser: starts `clockwork serve` with two sim devices on a free
# port, puts it under load with `clockwork loadgen`, and runs scripts/dashboard_check.py,
# which drives headless Chromium (the page goes live, every device shows bars, the counts
# shown match /metrics) and saves a screenshot. Installs Debian's chromium if it is
# missing. Always stops the server.
#
#   scripts/dashboard_check.sh [SCREENSHOT]   (default: target/dashboard.png)
set -euo pipefail
cd "$(dirname "$0")/.."
screenshot=$(realpath -m "${1:-target/dashboard.png}")

if ! command -v chromium >/dev/null; then
    sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

cargo build --locked --quiet --bin clockwork
binary=$PWD/target/debug/clockwork
# shellcheck source=serve_lib.sh
source scripts/serve_lib.sh

# Each device holds one resnet50 (7 pages of 8) and mlp-small, so both take work.
cat > "$work/config.toml" <<'TOML'
[server]
listen = "127.0.0.1:0"
[[devices]]
backend = "sim"
profile = "v100"
pages = 8
[[devices]]
backend = "sim"
profile = "v100"
pages = 8
[[models]]
name = "mlp"
profile = "mlp-small"
[[models]]
name = "resnet"
profile = "resnet50"
[[models]]
name = "resnet-b"
profile = "resnet50"
TOML

start_server "$binary" info

mkdir -p "$(dirname "$screenshot")"
timeout 180 python3 scripts/dashboard_check.py "$address" 2 "$screenshot" -- \
    "$binary" loadgen --url "http://$address" --rate 1200 --popularity 0 --duration 8s --quiet --out "$work/loadgen"
