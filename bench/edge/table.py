#!/usr/bin/env python3
"""The markdown table of one edge run, from the JSON reports `run.sh` left in its --out
directory: each rate's client-side goodput, late answers (those the server itself held
past the objective, by its Server-Timing, in brackets), refusals, errors, latencies of
successes and of refusals, and the answers within the objective per second.

    bench/edge/table.py DIR
"""
import json
import sys


def cell(value):
    return "-" if value is None else value


def main():
    out = sys.argv[1]
    print("| body | load | rate/s | offered | goodput | good/s | late (in server) | refused "
          "| errors | p50 ms | p99 ms | refusal p50 ms | refusal p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for fmt in ("json", "binary"):
        for x in ("0.25", "0.5", "0.8", "1", "1.5", "2"):
            r = json.load(open(f"{out}/{fmt}-{x}.json"))
            errors = sum(r["errors"].values()) + r["client_overflow"] + r["unanswered"]
            good_per_s = round(r["good"] / r["duration_s"], 1)
            print(f"| {fmt} | {x}x | {r['rate']} | {r['offered']} | {r['goodput']} | {good_per_s} "
                  f"| {r['late']} ({r.get('late_in_server', '-')}) | {r['refused']} | {errors} "
                  f"| {cell(r['ok_p50_ms'])} | {cell(r['ok_p99_ms'])} "
                  f"| {cell(r['refused_p50_ms'])} | {cell(r['refused_p99_ms'])} |")


if __name__ == "__main__":
    main()
