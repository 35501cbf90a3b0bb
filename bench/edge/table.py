#!/usr/bin/env python3
"""The markdown table of one edge run, from the JSON reports `run.sh` left in its --out
directory: each rate's client-side goodput, late answers (those the server itself held
past the objective, by its Server-Timing, in brackets), refusals, errors, latencies of
successes and of refusals, and the answers within the objective per second. Then, where
the run kept them (`cpu-<body>-<x>.json`), the CPU seconds over each rate: the client's
own (`client_cpu_s`, over its schedule), the server's threads by name (from a snapshot
before the client started to one after it ended: its warm-up and drain too), and the
share of one core that the client and the server's threads other than the devices' took
over the rate's duration (on this machine they share the front-end core).

    bench/edge/table.py DIR
"""
import os
import json
import sys

from compare import FORMATS, loads_in


def cell(value):
    return "-" if value is None else value


def main():
    out = sys.argv[1]
    print("| body | load | rate/s | offered | goodput | good/s | late (in server) | refused "
          "| errors | p50 ms | p99 ms | refusal p50 ms | refusal p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for fmt in FORMATS:
        for x in loads_in(out):
            # A run of some rates only (run.sh --formats, --loads).
            if not os.path.exists(f"{out}/{fmt}-{x}.json"):
                continue
            r = json.load(open(f"{out}/{fmt}-{x}.json"))
            errors = sum(r["errors"].values()) + r["client_overflow"] + r["unanswered"]
            good_per_s = round(r["good"] / r["duration_s"], 1)
            print(f"| {fmt} | {x}x | {r['rate']} | {r['offered']} | {r['goodput']} | {good_per_s} "
                  f"| {r['late']} ({cell(r.get('late_in_server'))}) | {r['refused']} | {errors} "
                  f"| {cell(r['ok_p50_ms'])} | {cell(r['ok_p99_ms'])} "
                  f"| {cell(r['refused_p50_ms'])} | {cell(r['refused_p99_ms'])} |")
    cpu_table(out)


def cpu_table(out):
    """CPU over each rate, where the run kept it."""
    rows = []
    for fmt in FORMATS:
        for x in loads_in(out):
            path = f"{out}/cpu-{fmt}-{x}.json"
            if not os.path.exists(path):
                continue
            r = json.load(open(f"{out}/{fmt}-{x}.json"))
            server = json.load(open(path))
            client = r.get("client_cpu_s")
            devices = sum(v for k, v in server.items() if "device" in k)
            front = sum(v for k, v in server.items() if "device" not in k) + (client or 0)
            threads = ", ".join(f"{k} {v}" for k, v in sorted(server.items()) if "device" not in k)
            rows.append(f"| {fmt} | {x}x | {cell(client)} | {threads} | {round(devices, 2)} "
                        f"| {round(front / r['duration_s'], 2)} |")
    if not rows:
        return
    print()
    print("| body | load | client CPU s | server CPU s by thread (devices apart) | devices s "
          "| client + server (not devices) / duration |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
