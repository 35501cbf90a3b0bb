#!/usr/bin/env bash
# Pipelines: the traffic cascade (detector, then a car and a person classifier per object,
# objects per frame of mean 2 and variance 3) on 8 emulated V100s at 0.5x, 1x and 1.5x of
# its capacity, Poisson roots, 100 ms end-to-end objective.
# Capacity: the highest root rate, in steps of 50/s, at which clockwork answers at least
# 99% of the roots within the objective in a 60 s run (found with CAPACITY_SWEEP=1).
# reactive is left out: it never refuses, and at 1x its backlog grew until one 60 s run
# had not finished after 6 minutes of CPU and 2 GB; clockwork-nodrop too at 1.5x (see
# pipeline_runs in common.sh).
# Each policy runs in its own process (no longer needed: the fan-outs are drawn from each
# root's number within its pipeline, the same in every runtime of one process).
# Usage: bench/simulate/pipeline.sh [DURATION]
source "$(dirname "$0")/common.sh"
DURATION="${1:-1m}"
CAPACITY=1350
FLAGS=(--pipeline traffic --fanout-mean 2 --fanout-var 3 --devices 8 --slo-ms 100 --seed 1)
pipeline_runs pipe 1200 1250 1300 1350 1400 1450 1500
