#!/usr/bin/env bash
# SLO sweep after the Clockwork paper: 6 emulated V100s, 12 and 48 ResNet50 models, Poisson
# arrivals at a fixed rate, SLO from 1x to 100x the batch-1 latency (2.73 ms).
# NOISE is the emulated devices' relative spread of run times (--noise-cv; 0 = exact).
# FACTORS (environment) picks the SLO factors, e.g. FACTORS="3 4 5" for a quick look.
# Usage: bench/simulate/slo_sweep.sh [RATE] [DURATION] [NOISE]
source "$(dirname "$0")/common.sh"
RATE="${1:-1200}"
DURATION="${2:-1m}"
NOISE="${3:-0}"
read -r -a factors <<< "${FACTORS:-1 2 3 4 5 7 10 20 50 100}"
runs=()
for models in 12 48; do
  for factor in "${factors[@]}"; do
    slo=$(python3 -c "print(round(2.73 * $factor, 2))")
    dir="$OUT/slo-$models-$factor-noise$NOISE"
    simulate --workload poisson --models "$models" --devices 6 --rate "$RATE" --duration "$DURATION" \
      --slo-ms "$slo" --policy clockwork,reactive --seed 1 --noise-cv "$NOISE" --out "$dir"
    runs+=("$models models, SLO ${factor}x ($slo ms)=$dir")
  done
done
echo "Made by: bench/simulate/slo_sweep.sh $RATE $DURATION $NOISE"
echo
summarize "${runs[@]}"
