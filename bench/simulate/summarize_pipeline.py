"""Prints Markdown tables from the report.json files of pipeline runs: the roots (one row
per run and policy), then each stage.

Usage: summarize_pipeline.py LABEL=DIR [LABEL=DIR ...]
"""
import json
import sys

ROOTS = ["run", "policy", "roots", "root goodput", "late roots", "refused", "failed",
         "e2e p50 ms", "e2e p99 ms", "e2e p99.9 ms", "mean batch"]
STAGES = ["run", "policy", "stage", "requests", "fan-out mean", "fan-out p99", "not ok",
          "p50 ms", "p99 ms"]


def table(columns, rows):
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


def runs(args):
    for arg in args:
        label, _, directory = arg.partition("=")
        with open(f"{directory}/report.json") as f:
            for p in json.load(f)["policies"]:
                yield label, p


def main():
    reports = list(runs(sys.argv[1:]))
    table(ROOTS, ([label, p["policy"], p["offered"], f"{p['goodput']:.4f}", p["late"],
                   sum(p["refused"].values()), p["failed"],
                   f"{p['latency_ms']['p50']:.2f}", f"{p['latency_ms']['p99']:.2f}",
                   f"{p['latency_ms']['p999']:.2f}", f"{p['mean_batch']:.2f}"]
                  for label, p in reports))
    print()
    rows = []
    for label, p in reports:
        for s in p["pipeline"]["stages"]:
            fan = s.get("fan_out") or {}
            rows.append([label, p["policy"], s["stage"], s["requests"],
                         f"{fan['mean']:.2f}" if fan else "-", fan.get("p99", "-"),
                         sum(s["not_ok"].values()), f"{s['latency_ms']['p50']:.2f}",
                         f"{s['latency_ms']['p99']:.2f}"])
    table(STAGES, rows)


if __name__ == "__main__":
    main()
