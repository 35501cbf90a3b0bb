#!/usr/bin/env bash
# Pipelines: the conditional cascade (a cheap classifier on every image, the expensive one
# on its features for the 25% it is unsure of) on 8 emulated V100s at 0.5x, 1x and 1.5x of
# its capacity, Poisson roots, 100 ms end-to-end objective.
# Capacity: the highest root rate, in steps of 250/s, at which clockwork answers at least
# 99% of the roots within the objective in a 60 s run (found with CAPACITY_SWEEP=1).
# Usage: bench/simulate/cascade.sh [DURATION]
source "$(dirname "$0")/common.sh"
DURATION="${1:-1m}"
CAPACITY=3250
FLAGS=(--pipeline cascade --escalate 0.25 --devices 8 --slo-ms 100 --seed 1)
pipeline_runs cascade 1000 2000 3000 3250 3500 3750 4000 5000
