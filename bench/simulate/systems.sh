#!/usr/bin/env bash
# SLOpt against its baselines (issue 13): experiments A (goodput and P99 at equal devices,
# 0.3x-1.2x of capacity), B (fewest devices with >= 99% of roots in time) and C (fewest
# devices with P99 of the answered roots within the objective and >= 95% answered in
# time), on the traffic cascade and the conditional cascade, 100 ms objective, Poisson
# roots, exact durations, seed 1. Every system of `clockwork simulate --policy` for
# pipelines, each run on the same arrivals. 8 devices in A (capacities in systems.py),
# 1-16 in B and C at those capacities' rates.
# Writes the tables to stdout and the plots to docs/img/.
# B2 is B judged after a 2 s warm-up; S the sweeps (objective, fan-out, bursty arrivals).
# Usage: bench/simulate/systems.sh [DURATION] [EXPERIMENTS]   (default: 20s "A B B2 C S")
source "$(dirname "$0")/common.sh"
DURATION="${1:-20s}"
python3 "$ROOT/bench/simulate/systems.py" --clockwork "$CLOCKWORK" --out "$OUT/systems" \
  --duration "$DURATION" --plots "$ROOT/docs/img" ${2:-A B B2 C S}
