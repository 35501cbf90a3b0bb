#!/usr/bin/env python3
"""Soak runs side by side: one markdown row per `bench/soak.sh` log, from its `offered`
line and the server's `clockwork_device_outages{cause="hung"}` count.

    bench/soak_table.py LABEL=LOG [LABEL=LOG ...]

A LABEL says what the run was (`40/s on`); its cells are the log's own figures.
"""
import re
import sys


def row(label, path):
    text = open(path).read()
    offered = re.search(r"^offered (\d+) answered (\d+) ok (\d+) late (\d+) refused (\d+)", text, re.M)
    if not offered:
        sys.exit(f"{path}: no `offered` line (did the soak finish?)")
    hung = re.search(r'^clockwork_device_outages\{cause="hung"\} (\d+)', text, re.M)
    n = [int(g) for g in offered.groups()]
    cells = [label, *(f"{v:,}" for v in n), hung.group(1) if hung else "0"]
    return "| " + " | ".join(cells) + " |"


def main(args):
    if not args or any("=" not in a for a in args):
        sys.exit(__doc__)
    print("| run | offered | answered | ok in time | late | refused | outages `hung` |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for arg in args:
        label, path = arg.split("=", 1)
        print(row(label, path))


if __name__ == "__main__":
    main(sys.argv[1:])
