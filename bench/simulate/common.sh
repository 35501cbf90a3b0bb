# Shared by the experiment scripts: build once, then run `clockwork simulate`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/target/experiments}"
# CLOCKWORK=path/to/clockwork uses that binary instead of building one into target/.
if [[ -z "${CLOCKWORK:-}" ]]; then
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin clockwork
  CLOCKWORK="$ROOT/target/release/clockwork"
fi
# POLICY_CONFIG=path/to/file.toml starts every run from that file's [policy] table.
simulate() { "$CLOCKWORK" simulate --quiet ${POLICY_CONFIG:+--config "$POLICY_CONFIG"} "$@" > /dev/null; }
summarize() { python3 "$ROOT/bench/simulate/summarize.py" "$@"; }

# A pipeline's runs, with FLAGS (an array) set by the caller: with CAPACITY_SWEEP=1,
# clockwork for 60 s at each of the given rates; otherwise clockwork and clockwork-nodrop
# at 0.5x and 1x of CAPACITY, and clockwork alone at 1.5x (without early refusal the
# backlog grows without bound there), for DURATION each. Prints the summary.
# Usage: pipeline_runs NAME RATE...
pipeline_runs() {
  local name=$1; shift
  local runs=()
  if [[ "${CAPACITY_SWEEP:-0}" == 1 ]]; then
    for rate in "$@"; do
      simulate "${FLAGS[@]}" --rate "$rate" --duration 60s --policy clockwork --out "$OUT/$name-cap-$rate"
      runs+=("$rate/s=$OUT/$name-cap-$rate")
    done
  else
    for factor in 0.5 1.0 1.5; do
      local rate policies=(clockwork clockwork-nodrop)
      rate=$(python3 -c "print(round($CAPACITY * $factor))")
      [[ "$factor" == 1.5 ]] && policies=(clockwork)
      for policy in "${policies[@]}"; do
        simulate "${FLAGS[@]}" --rate "$rate" --duration "$DURATION" --policy "$policy" \
          --out "$OUT/$name-$factor-$policy"
        runs+=("${factor}x ($rate/s)=$OUT/$name-$factor-$policy")
      done
    done
  fi
  python3 "$ROOT/bench/simulate/summarize_pipeline.py" "${runs[@]}"
}
