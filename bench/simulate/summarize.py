"""Prints a Markdown table from report.json files: one row per (run, policy).

Usage: summarize.py LABEL=DIR [LABEL=DIR ...]
"""
import json
import sys

COLUMNS = ["run", "policy", "offered", "goodput", "late", "refused", "p50 ms", "p99 ms",
           "p99.99 ms", "max ms", "cold loads", "mean batch", "sim req/wall s"]


def rows(label, directory):
    with open(f"{directory}/report.json") as f:
        report = json.load(f)
    for p in report["policies"]:
        lat = p["latency_ms"]
        yield [label, p["policy"], p["offered"], f"{p['goodput']:.4f}", p["late"],
               sum(p["refused"].values()), f"{lat['p50']:.2f}", f"{lat['p99']:.2f}",
               f"{lat['p9999']:.2f}", f"{lat['max']:.2f}", p["cold_loads"],
               f"{p['mean_batch']:.2f}", f"{p['sim_requests_per_wall_s']:.0f}"]


def main():
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for arg in sys.argv[1:]:
        label, _, directory = arg.partition("=")
        for row in rows(label, directory):
            print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
