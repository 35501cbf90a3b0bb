#!/usr/bin/env bash
# The fault soak of docs/RELIABILITY.md ("Faults"): `clockwork serve` on the default
# config.toml (the zoo on cpu devices, real HTTP) with two cpu devices, faults injected on
# device 0 (`[devices.faults]`: failures at a rate, LOADs that fail, a slow window, a hang,
# a panicking episode), under `clockwork loadgen`. Samples the server's RSS every 5 s.
# Prints offered, answered, late, the faults the server counted, and the RSS samples.
# Usage: bench/soak.sh [seconds] [rate]   (default 200 s at 40 requests/s; a minutes-long
# run, not CI). BIN=path/to/clockwork to use a built binary (default: a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-200}"
rate="${2:-40}"
if [ -z "${BIN:-}" ]; then
    cargo build --release --bin clockwork
    BIN=target/release/clockwork
fi
work=$(mktemp -d)
server="" sampler=""
trap 'kill "$server" "$sampler" 2>/dev/null || true; cp "$work/server.log" "${LOG:-/dev/null}" 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
# The default configuration, two cpu devices, faults on device 0 (times from the start).
sed -e "s/^listen = .*/listen = \"127.0.0.1:$port\"/" \
    -e 's/^count = "auto"/count = 2/' \
    -e "s#^path = \"models\"#path = \"$work/models\"#" config.toml > "$work/config.toml"
default_faults='failure_rate = 0.02
load_failure_rate = 0.2
slowdown = { from = "40s", until = "60s", factor = 4.0 }
hang = { from = "80s", lasting = "10s" }
panic = { from = "110s", lasting = "10s" }'
faults="${FAULTS:-$default_faults}"
printf '\n[devices.faults]\ndevices = [0]\nseed = 7\n%s\n' "$faults" >> "$work/config.toml"
"$BIN" serve --config "$work/config.toml" > "$work/server.log" 2>&1 &
server=$!
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/v2/health/ready" > /dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log"; exit 1; }
    sleep 0.5
done
start=$(date +%s)
( while kill -0 "$server" 2>/dev/null; do
      echo "$(( $(date +%s) - start )) $(ps -o rss= -p "$server")"; sleep "${RSS_EVERY:-5}"
  done ) > "$work/rss" &
sampler=$!
"$BIN" loadgen --url "http://127.0.0.1:$port" --rate "$rate" --duration "${secs}s" \
    --timeout 10s --quiet --out "$work/out"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^clockwork_(device_faults|device_outages|devices_out|device_probes)' || true
python3 - "$work/out/report.json" "$work/rss" "${RSS_EVERY:-5}" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"][0]
answered = p["ok_in_slo"] + p["late"] + sum(p["refused"].values()) + p["failed"]
print(f"offered {p['offered']} answered {answered} ok {p['ok_in_slo']} late {p['late']} "
      f"refused {sum(p['refused'].values())} failed {p['failed']} errors {p['errors']}")
rss = [int(l.split()[1]) for l in open(sys.argv[2]) if len(l.split()) == 2]
print(f"rss KiB ({len(rss)} samples, every {sys.argv[3]} s): first {rss[0]} min {min(rss)} max {max(rss)} last {rss[-1]}")
print("rss samples:", " ".join(str(r) for r in rss))
PY
grep -cE "taken out of service|back in service" "$work/server.log" | sed 's/^/health log lines: /'
