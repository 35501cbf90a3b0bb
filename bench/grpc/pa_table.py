#!/usr/bin/env python3
"""A markdown table of perf_analyzer runs from their printed output: one row per run, one
column per concurrency, each cell its throughput and average latency (the summary lines
`Concurrency: N, throughput: X infer/sec, latency Y usec` that perf_analyzer prints last).

    bench/grpc/pa_table.py LABEL=LOG [LABEL=LOG ...]
"""
import re
import sys

SUMMARY = re.compile(r"^Concurrency: (\d+), throughput: ([\d.]+) infer/sec, latency (\d+) usec")


def rows(log):
    """{concurrency: (infer/s, latency ms)} from one run's output."""
    found = {}
    for line in open(log):
        m = SUMMARY.match(line)
        if m:
            found[int(m.group(1))] = (float(m.group(2)), int(m.group(3)) / 1000)
    return found


def main():
    runs = [(arg.split("=", 1)[0], rows(arg.split("=", 1)[1])) for arg in sys.argv[1:]]
    levels = sorted({c for _, r in runs for c in r})
    print("| run | " + " | ".join(f"c{c}" for c in levels) + " |")
    print("| --- |" + " --- |" * len(levels))
    for label, r in runs:
        cells = [f"{r[c][0]:.1f}, {r[c][1]:.2f} ms" if c in r else "-" for c in levels]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
