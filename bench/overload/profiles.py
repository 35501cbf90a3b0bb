#!/usr/bin/env python3
"""The zoo's batch profiles as `clockwork serve` measured them at registration: per model
and batch size, the median run time and how much each request costs against batch 1
(below 1: a larger batch is cheaper per request; above: dearer).

    bench/overload/profiles.py MODELS_DIR

MODELS_DIR is a served repository (`models/` beside a default `config.toml` after
`clockwork serve` has started once); reads `<model>/1/profile.json`.
"""
import json
import pathlib
import sys


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = pathlib.Path(sys.argv[1])
    print("| model | batch: median ms (cost per request / batch 1's) |")
    print("| --- | --- |")
    for path in sorted(root.glob("*/1/profile.json")):
        profile = json.load(open(path))[0]["profile"]["batches"]
        one = profile[0]["latency"]["p50"]
        cells = []
        for b in profile:
            p50 = b["latency"]["p50"]
            cells.append(f"{b['batch']}: {p50 / 1e6:.3f} ({p50 / b['batch'] / one:.2f})")
        print(f"| {path.parent.parent.name} | " + ", ".join(cells) + " |")


if __name__ == "__main__":
    main()
