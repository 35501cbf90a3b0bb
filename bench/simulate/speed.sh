#!/usr/bin/env bash
# Simulator speed from half load to overload, for clockwork and reactive: requests
# simulated per wall second and the cost per request (wall and CPU microseconds), against
# the same policy's at half load. Points: the load sweep's (0.5x-1.5x of 5540/s) and a
# maf-synth trace (1500 models, 4 V100s, 60 ms) at 900, 1800 and 2700/s. See speed.py.
# Usage: bench/simulate/speed.sh [DURATION] [TRACE_DURATION]   (default: 20s 60s)
source "$(dirname "$0")/common.sh"
python3 "$ROOT/bench/simulate/speed.py" --clockwork "$CLOCKWORK" --out "$OUT/speed" \
  --duration "${1:-20s}" --trace-duration "${2:-60s}"
