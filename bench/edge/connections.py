#!/usr/bin/env python3
"""What a refusal costs the client's connections: for runs of `run.sh` (client.py's
per-request logs, `<body>-<x>.requests.jsonl`, with its tracing of each request's steps),
per run, body and rate: the requests offered, those answered in time, those answered late
and of them those late only by the client's own connecting (`late.by_connecting`), the
connections the client opened during the schedule (a refusal that leaves its body unread
closes its connection, and the next request on it opens another), and the refusals' p50
and p99 at the client.

    bench/edge/connections.py NAME=DIR [NAME=DIR ...]
"""
import glob
import json
import sys

from late import by_connecting

OBJECTIVE_MS = 100.0
REFUSAL_STATUSES = (429, 503)


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def runs(out, body):
    """Each rate's (load, report, log lines) of one body, in the order of the loads."""
    suffix = ".requests.jsonl"
    found = []
    for path in glob.glob(f"{out}/{body}-*{suffix}"):
        load = path[len(f"{out}/{body}-"):-len(suffix)]
        report = json.load(open(path[:-len(suffix)] + ".json"))
        found.append((float(load), load, report, [json.loads(line) for line in open(path)]))
    return [(load, report, lines) for _, load, report, lines in sorted(found)]


def row(name, body, load, report, lines):
    objective = report.get("objective_ms", OBJECTIVE_MS)
    ok = [r for r in lines if r["status"] == 200]
    late = [r for r in ok if r["latency_ms"] > objective]
    if any("answer_head_ms" not in r for r in lines):
        connecting = opened = "not recorded"
    else:
        connecting = sum(1 for r in late if by_connecting(r, objective))
        opened = sum(1 for r in lines if "connect_ms" in r)
    refusals = [r["latency_ms"] for r in lines if r["status"] in REFUSAL_STATUSES]
    p50, p99 = pct(refusals, 50), pct(refusals, 99)
    refusal = "-" if p50 is None else f"{p50:.2f} / {p99:.2f}"
    return (f"| {name} | {body} | {load}x | {report['offered']} | {len(ok) - len(late)} | "
            f"{len(late)} | {connecting} | {opened} | {refusal} |")


def main(argv):
    if not argv:
        sys.exit(__doc__)
    print("| run | body | load | offered | in time | late at the client | of them late by the "
          "client's own connecting | connections opened | refusal p50 / p99 ms (client) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for arg in argv:
        name, _, out = arg.partition("=")
        for body in ("json", "binary"):
            for load, report, lines in runs(out, body):
                print(row(name, body, load, report, lines))


if __name__ == "__main__":
    main(sys.argv[1:])
