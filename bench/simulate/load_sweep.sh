#!/usr/bin/env bash
# Load sweep: offered load from 0.5x to 1.5x of nominal capacity on 6 emulated V100s with
# 48 ResNet50 models (all fit in memory), Poisson arrivals, 100 ms SLO.
# Nominal capacity: 6 devices x 16 requests per 17.33 ms (batch-16 throughput) = 5540 req/s.
# Usage: bench/simulate/load_sweep.sh [DURATION]
source "$(dirname "$0")/common.sh"
DURATION="${1:-1m}"
CAPACITY=5540
runs=()
for factor in 0.5 0.75 1.0 1.25 1.5; do
  rate=$(python3 -c "print(round($CAPACITY * $factor))")
  dir="$OUT/load-$factor"
  simulate --workload poisson --models 48 --devices 6 --rate "$rate" --duration "$DURATION" \
    --slo-ms 100 --policy clockwork,reactive,clockwork-nodrop --seed 1 --out "$dir"
  runs+=("${factor}x ($rate/s)=$dir")
done
summarize "${runs[@]}"
