#!/usr/bin/env bash
# Clockwork-scale run: 4000 ResNet50 models on 6 emulated V100s, a synthetic Azure
# Functions trace, 100 ms SLO, 30 simulated minutes, three policies on the same arrivals.
# Usage: bench/simulate/scale.sh [RATE] [DURATION]
source "$(dirname "$0")/common.sh"
RATE="${1:-1500}"
DURATION="${2:-30m}"
simulate --workload maf-synth --models 4000 --devices 6 --device-profile v100 \
  --rate "$RATE" --duration "$DURATION" --slo-ms 100 \
  --policy clockwork,reactive,clockwork-nodrop --seed 1 --out "$OUT/scale"
summarize "scale=$OUT/scale"
echo "report: $OUT/scale/report.md"
