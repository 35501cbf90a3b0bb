#!/usr/bin/env bash
# Pipelines: the conditional cascade (a cheap classifier on every image, the expensive one
# on its features for the 25% it is unsure of) on 8 emulated V100s at 0.5x, 1x and 1.5x of
# its capacity, Poisson roots, 100 ms end-to-end objective.
# Capacity: the highest root rate, in steps of 250/s, at which clockwork answers at least
# 99% of the roots within the objective in a 60 s run (found with CAPACITY_SWEEP=1).
# clockwork-nodrop is left out at 1.5x, as in pipeline.sh (its backlog grows without bound).
# Usage: bench/simulate/cascade.sh [DURATION]
source "$(dirname "$0")/common.sh"
DURATION="${1:-1m}"
CAPACITY=3250
FLAGS=(--pipeline cascade --escalate 0.25 --devices 8 --slo-ms 100 --seed 1)
if [[ "${CAPACITY_SWEEP:-0}" == 1 ]]; then
  runs=()
  for rate in 1000 2000 3000 3250 3500 3750 4000 5000; do
    simulate "${FLAGS[@]}" --rate "$rate" --duration 60s --policy clockwork --out "$OUT/cascade-cap-$rate"
    runs+=("$rate/s=$OUT/cascade-cap-$rate")
  done
  python3 "$ROOT/bench/simulate/summarize_pipeline.py" "${runs[@]}"
  exit 0
fi
runs=()
for factor in 0.5 1.0 1.5; do
  rate=$(python3 -c "print(round($CAPACITY * $factor))")
  policies=(clockwork clockwork-nodrop)
  [[ "$factor" == 1.5 ]] && policies=(clockwork)
  for policy in "${policies[@]}"; do
    dir="$OUT/cascade-$factor-$policy"
    simulate "${FLAGS[@]}" --rate "$rate" --duration "$DURATION" --policy "$policy" --out "$dir"
    runs+=("${factor}x ($rate/s)=$dir")
  done
done
python3 "$ROOT/bench/simulate/summarize_pipeline.py" "${runs[@]}"
