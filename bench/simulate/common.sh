# Shared by the experiment scripts: build once, then run `clockwork simulate`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-$ROOT/target/experiments}"
cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" --bin clockwork
CLOCKWORK="$ROOT/target/release/clockwork"
simulate() { "$CLOCKWORK" simulate --quiet "$@" > /dev/null; }
summarize() { python3 "$ROOT/bench/simulate/summarize.py" "$@"; }
