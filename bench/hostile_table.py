#!/usr/bin/env python3
"""Prints the table of docs/RELIABILITY.md ("A client's values against the devices") from
runs of bench/hostile_values.sh: one row per run, from the answers.txt in its OUT.

    bench/hostile_table.py "BUILD|BACKEND|RATE|RUST_BACKTRACE=OUT" ... | scripts/doc_table.py ...

The first four fields of each argument only label the row (the script cannot know them).
"""
import ast
import sys


def row(label, out):
    counts, outages = {}, []
    for line in open(f"{out}/answers.txt"):
        kind, _, rest = line.partition(": ")
        if rest.startswith("{"):
            counts[kind] = ast.literal_eval(rest)
        elif line.startswith("clockwork_device_outages"):
            cause = line.split('"')[1]
            outages.append(f"{cause} {int(float(line.split()[-1]))}")

    def served(kind):
        c = counts.get(kind, {})
        return f"{c.get('200', 0)} / {sum(c.values())}"

    in_range = counts.get("embedding in range", {})
    hostile = counts.get("embedding out of range", {})
    failed = in_range.get("500 execution_failed", 0)
    return " | ".join(
        label.split("|")
        + [
            served("mlp"),
            f"{served('embedding in range')} ({failed})",
            f"{hostile.get('500 execution_failed', 0)} / {sum(hostile.values())}",
            ", ".join(outages) or "none",
        ]
    )


print("| build | backend | out-of-range/s | `RUST_BACKTRACE` | mlp served | in-range served (500) "
      "| out-of-range 500 | device outages |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for argument in sys.argv[1:]:
    label, _, out = argument.rpartition("=")
    print(f"| {row(label, out)} |")
